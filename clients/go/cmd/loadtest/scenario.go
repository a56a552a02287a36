package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// Event is one `[[events]]` entry of a scenario file (loadtest/scenario.py's Event): at
// `at_s` seconds from the start, `restart` (members leave and rejoin one by one, `interval_s`
// apart; count 0 = all), `vanish` (count members per group stop without leaving), `join`
// (count new members per group), `add_groups` (count new groups) or `hook` (run the command
// named `hook`).
type Event struct {
	AtS       float64 `json:"at_s"`
	Kind      string  `json:"kind"`
	Count     int     `json:"count"`
	IntervalS float64 `json:"interval_s"`
	Hook      string  `json:"hook"`
}

// rawEvent is an event as written in TOML: absent fields take the Python driver's defaults.
type rawEvent struct {
	AtS       *float64 `toml:"at_s"`
	Kind      *string  `toml:"kind"`
	Count     *int     `toml:"count"`
	IntervalS *float64 `toml:"interval_s"`
	Hook      *string  `toml:"hook"`
}

var eventKinds = []string{"restart", "vanish", "join", "add_groups", "hook"}

func (e rawEvent) event() (Event, error) {
	ev := Event{Count: 1, IntervalS: 0.5}
	if e.AtS == nil || e.Kind == nil {
		return ev, fmt.Errorf("an event needs at_s and kind")
	}
	ev.AtS, ev.Kind = *e.AtS, *e.Kind
	if e.Count != nil {
		ev.Count = *e.Count
	}
	if e.IntervalS != nil {
		ev.IntervalS = *e.IntervalS
	}
	if e.Hook != nil {
		ev.Hook = *e.Hook
	}
	return ev, ev.validate()
}

func (e Event) validate() error {
	if !slices.Contains(eventKinds, e.Kind) {
		return fmt.Errorf("event kind %q: expected one of %s", e.Kind, strings.Join(eventKinds, ", "))
	}
	if e.Kind == "hook" && e.Hook == "" {
		return fmt.Errorf("a hook event needs hook = NAME")
	}
	if e.AtS < 0 || e.Count < 0 {
		return fmt.Errorf("event at_s and count must not be negative")
	}
	return nil
}

// Scenario is `groupcoord loadtest`'s scenario file (docs/loadtest.md). Field names, defaults
// and the built-ins are the Python driver's (loadtest/scenario.py).
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
	RawEvents          []rawEvent        `toml:"events" json:"-"`
	Events             []Event           `toml:"-" json:"events"`
	Hooks              map[string]string `toml:"hooks" json:"-"`
	// HookNames: the result lists the hooks' names (not their commands), as Python does.
	HookNames []string `toml:"-" json:"hooks"`
}

// scaled: a built-in event time, a fraction of the duration (rounded as Python rounds it).
func scaled(fraction, duration float64) float64 { return math.Round(fraction*duration*1000) / 1000 }

var builtins = []string{"steady", "join-storm", "rolling-restart", "churn", "shard-kill", "scale-out"}

// builtin is one of the built-in scenarios (the Python driver's values); durationS > 0 sets
// the duration the event times are fractions of (as `groupcoord loadtest NAME --duration`).
func builtin(name string, durationS float64) (Scenario, error) {
	d := durationS
	if d <= 0 {
		d = 10
		if name == "join-storm" {
			d = 20
		}
	}
	s := Scenario{
		Name: name, Groups: 5, Members: 4, DurationS: d, Protocol: "consumer", Partitions: 12,
		CommitIntervalS: 1, RebalanceTimeoutMs: 30000, SessionTimeoutMs: 10000,
		ClassicHeartbeatMs: 1000, SettleS: 30, Events: []Event{}, Hooks: map[string]string{},
	}
	switch name {
	case "steady":
		s.Description = "N groups x M members, heartbeats and commits"
	case "join-storm":
		s.Groups, s.Members, s.Partitions, s.SettleS = 1, 1000, 1000, 120
		s.Description = "many members join one group at once"
	case "rolling-restart":
		s.StaticFraction, s.Protocol = 0.5, "mixed"
		s.Events = []Event{{AtS: scaled(0.2, d), Kind: "restart", Count: 0, IntervalS: 0.2}}
		s.Description = "every member leaves and rejoins one by one (half static, half dynamic; consumer and classic groups)"
	case "churn":
		s.Events = []Event{
			{AtS: scaled(0.2, d), Kind: "vanish", Count: 1, IntervalS: 0.5},
			{AtS: scaled(0.25, d), Kind: "join", Count: 1, IntervalS: 0.5},
		}
		s.Description = "members vanish without leaving (session timeouts) and others join"
	case "shard-kill":
		s.Events = []Event{
			{AtS: scaled(0.3, d), Kind: "hook", Count: 1, IntervalS: 0.5, Hook: "kill"},
			{AtS: scaled(0.7, d), Kind: "hook", Count: 1, IntervalS: 0.5, Hook: "restart"},
		}
		s.Description = "a hook kills (then restarts) a shard of the target deployment"
	case "scale-out":
		for _, f := range []float64{0.2, 0.4, 0.6} {
			s.Events = append(s.Events, Event{AtS: scaled(f, d), Kind: "add_groups", Count: 2, IntervalS: 0.5})
		}
		s.Description = "groups are added while the others run"
	default:
		return s, fmt.Errorf("unknown scenario %q (built-ins: %s)", name, strings.Join(builtins, ", "))
	}
	return s, nil
}

// load reads a scenario file: its fields over the built-in named by `base` (or the defaults);
// `[[events]]` replace the base's events, `[hooks]` add to its hooks.
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
	s, err := builtin(base, probe.DurationS)
	if err != nil {
		return s, err
	}
	if probe.Base == "" {
		s.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
		s.Description = ""
		s.Events = []Event{}
		if probe.DurationS <= 0 {
			s.DurationS = 10
		}
	}
	baseHooks := s.Hooks
	s.Hooks = nil
	md, err := toml.Decode(string(raw), &s)
	if err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		var keys []string
		for _, k := range undecoded {
			if len(k) >= 1 && k[0] == "hooks" {
				continue // hook names are free
			}
			keys = append(keys, k.String())
		}
		if len(keys) > 0 {
			sort.Strings(keys)
			return s, fmt.Errorf("%s: unknown scenario fields: %s", path, strings.Join(keys, ", "))
		}
	}
	if md.IsDefined("events") {
		s.Events = []Event{}
		for _, re := range s.RawEvents {
			e, err := re.event()
			if err != nil {
				return s, fmt.Errorf("%s: %w", path, err)
			}
			s.Events = append(s.Events, e)
		}
	}
	s.RawEvents = nil
	for k, v := range baseHooks {
		if _, ok := s.Hooks[k]; !ok {
			if s.Hooks == nil {
				s.Hooks = map[string]string{}
			}
			s.Hooks[k] = v
		}
	}
	if s.Hooks == nil {
		s.Hooks = map[string]string{}
	}
	return s, nil
}

var protocols = []string{"consumer", "classic", "mixed"}

func (s Scenario) validate() error {
	if !slices.Contains(protocols, s.Protocol) {
		return fmt.Errorf("scenario %q: protocol %q: expected one of %s", s.Name, s.Protocol, strings.Join(protocols, ", "))
	}
	if s.Groups < 1 || s.Members < 1 || s.Partitions < 1 || s.DurationS <= 0 {
		return fmt.Errorf("scenario %q: groups, members, partitions and duration_s must be positive", s.Name)
	}
	if s.StaticFraction < 0 || s.StaticFraction > 1 {
		return fmt.Errorf("scenario %q: static_fraction is between 0 and 1", s.Name)
	}
	for _, e := range s.Events {
		if err := e.validate(); err != nil {
			return fmt.Errorf("scenario %q: %w", s.Name, err)
		}
	}
	return nil
}

// protocolOf: mixed = even groups KIP-848, odd groups classic.
func (s Scenario) protocolOf(groupIndex int) string {
	if s.Protocol == "mixed" {
		if groupIndex%2 == 0 {
			return "consumer"
		}
		return "classic"
	}
	return s.Protocol
}

// isStatic spreads static members evenly, as the Python driver does.
func (s Scenario) isStatic(i int) bool {
	if s.StaticFraction <= 0 {
		return false
	}
	return int(float64(i+1)*s.StaticFraction) > int(float64(i)*s.StaticFraction)
}
