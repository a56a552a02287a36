package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// Scenario is the subset of `groupcoord loadtest`'s scenario file (docs/loadtest.md) the Go
// driver runs: KIP-848 groups joining, heartbeating and committing for the duration. Field
// names and defaults are the Python driver's (loadtest/scenario.py).
type Scenario struct {
	Base               string            `toml:"base" json:"-"`
	Name               string            `toml:"name" json:"name"`
	Description        string            `toml:"description" json:"description"`
	Groups             int               `toml:"groups" json:"groups"`
	Members            int               `toml:"members" json:"members"`
	DurationS          float64           `toml:"duration_s" json:"duration_s"`
	Protocol           string            `toml:"protocol" json:"protocol"`
	StaticFraction     float64           `toml:"static_fraction" json:"static_fraction"`
	Partitions         int               `toml:"partitions" json:"partitions"`
	CommitIntervalS    float64           `toml:"commit_interval_s" json:"commit_interval_s"`
	RebalanceTimeoutMs int32             `toml:"rebalance_timeout_ms" json:"rebalance_timeout_ms"`
	SessionTimeoutMs   int32             `toml:"session_timeout_ms" json:"session_timeout_ms"`
	ClassicHeartbeatMs int32             `toml:"classic_heartbeat_interval_ms" json:"classic_heartbeat_interval_ms"`
	RampS              float64           `toml:"ramp_s" json:"ramp_s"`
	SettleS            float64           `toml:"settle_s" json:"settle_s"`
	WarmupS            float64           `toml:"warmup_s" json:"warmup_s"`
	Events             []any             `toml:"events" json:"events"`
	Hooks              map[string]string `toml:"hooks" json:"-"`
}

// builtin is one of the built-in scenarios the Go driver runs (the Python driver's values).
func builtin(name string) (Scenario, error) {
	s := Scenario{
		Name: name, Groups: 5, Members: 4, DurationS: 10, Protocol: "consumer", Partitions: 12,
		CommitIntervalS: 1, RebalanceTimeoutMs: 30000, SessionTimeoutMs: 10000,
		ClassicHeartbeatMs: 1000, SettleS: 30, Events: []any{},
	}
	switch name {
	case "steady":
		s.Description = "N groups x M members, heartbeats and commits"
	case "join-storm":
		s.Groups, s.Members, s.Partitions, s.DurationS, s.SettleS = 1, 1000, 1000, 20, 120
		s.Description = "many members join one group at once"
	case "rolling-restart", "churn", "shard-kill", "scale-out":
		return s, fmt.Errorf("scenario %q has events: the Go driver runs steady and join-storm (and files without events); use groupcoord loadtest", name)
	default:
		return s, fmt.Errorf("unknown scenario %q (built-ins: steady, join-storm)", name)
	}
	return s, nil
}

// load reads a scenario file: its fields over the built-in named by `base` (or the defaults).
func load(path string) (Scenario, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Scenario{}, err
	}
	var probe struct {
		Base      string  `toml:"base"`
		DurationS float64 `toml:"duration_s"`
	}
	if _, err := toml.Decode(string(raw), &probe); err != nil {
		return Scenario{}, fmt.Errorf("%s: %w", path, err)
	}
	base := probe.Base
	if base == "" {
		base = "steady"
	}
	s, err := builtin(base)
	if err != nil {
		return s, err
	}
	if probe.Base == "" {
		s.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
		s.Description = ""
	}
	md, err := toml.Decode(string(raw), &s)
	if err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		var keys []string
		for _, k := range undecoded {
			keys = append(keys, k.String())
		}
		sort.Strings(keys)
		return s, fmt.Errorf("%s: unknown scenario fields: %s", path, strings.Join(keys, ", "))
	}
	return s, nil
}

func (s Scenario) validate() error {
	if len(s.Events) > 0 {
		return fmt.Errorf("scenario %q has events: the Go driver runs no events (use groupcoord loadtest)", s.Name)
	}
	if s.Protocol != "consumer" {
		return fmt.Errorf("scenario %q: protocol %q: the Go driver runs KIP-848 members only (consumer)", s.Name, s.Protocol)
	}
	if s.Groups < 1 || s.Members < 1 || s.Partitions < 1 || s.DurationS <= 0 {
		return fmt.Errorf("scenario %q: groups, members, partitions and duration_s must be positive", s.Name)
	}
	return nil
}

// isStatic spreads static members evenly, as the Python driver does.
func (s Scenario) isStatic(i int) bool {
	if s.StaticFraction <= 0 {
		return false
	}
	return int(float64(i+1)*s.StaticFraction) > int(float64(i)*s.StaticFraction)
}
