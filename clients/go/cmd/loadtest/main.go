// Command loadtest drives a groupcoord deployment over gRPC with the generated Go stubs, from
// the same scenario files as `groupcoord loadtest` (docs/loadtest.md), where Python's per-call
// cost would limit the rate: KIP-848 members of the member library (clients/go/member: it
// heartbeats at the interval the coordinator returns, reconciles, rejoins when fenced and
// leaves on close; the driver's callbacks commit and give up revoked partitions and take the
// new ones), committing periodically; classic members (classic.go); and the scenario's events as the Python driver plays them
// (rolling restarts, members vanishing or joining, groups added, hook commands). It writes DIR/result.json in the Python driver's format
// (groupcoord-loadtest/1), so `groupcoord loadtest compare` reads it; exit 0 when the
// invariants held, 1 when not (or the run failed), 2 on a usage error.
//
//	go run ./cmd/loadtest -target localhost:50051 -output out steady
//	go run ./cmd/loadtest -target localhost:50051 -scenario my.toml -output out
//	go run ./cmd/loadtest -target localhost:50051 -hook 'kill=kill -9 1234' shard-kill
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func usage(msg string) {
	if msg != "" {
		fmt.Fprintf(os.Stderr, "loadtest: %s\n", msg)
	}
	fmt.Fprintln(os.Stderr, "usage: loadtest -target HOST:PORT[,...] [-scenario FILE | NAME] [-groups N] [-members M] [-partitions P] [-duration D] [-settle D] [-commit-interval S] [-ramp D] [-protocol consumer|classic|mixed] [-hook NAME=COMMAND ...] [-output DIR]")
	flag.PrintDefaults()
	os.Exit(2)
}

func main() {
	target := flag.String("target", os.Getenv("GROUPCOORD_LOADTEST_TARGET"), "gRPC addresses HOST:PORT[,HOST:PORT...]")
	file := flag.String("scenario", "", "a scenario TOML file (instead of a built-in NAME)")
	groups := flag.Int("groups", 0, "groups (overrides the scenario)")
	members := flag.Int("members", 0, "members per group (overrides the scenario)")
	partitions := flag.Int("partitions", 0, "partitions of the topic (overrides the scenario)")
	duration := flag.Duration("duration", 0, "run time, e.g. 10s (overrides the scenario)")
	settle := flag.Duration("settle", 0, "longest wait for Stable after the run (overrides the scenario)")
	commitInterval := flag.Float64("commit-interval", 0, "seconds between commits, 0: none (overrides the scenario)")
	ramp := flag.Duration("ramp", 0, "spread the initial joins over this long (overrides the scenario)")
	protocol := flag.String("protocol", "", "consumer, classic or mixed (overrides the scenario)")
	var hookFlags hookList
	flag.Var(&hookFlags, "hook", "NAME=COMMAND run by the scenario's hook events (sh -c; repeatable)")
	output := flag.String("output", "loadtest-result", "directory for result.json")
	quiet := flag.Bool("quiet", false, "no progress line")
	flag.Usage = func() { usage("") }
	flag.Parse()
	if *target == "" {
		usage("-target is required")
	}
	var s Scenario
	var err error
	switch {
	case *file != "" && flag.NArg() == 0:
		s, err = load(*file)
	case *file == "" && flag.NArg() == 1:
		s, err = builtin(flag.Arg(0), duration.Seconds())
	default:
		usage("give a scenario NAME or -scenario FILE (not both)")
	}
	if err != nil {
		usage(err.Error())
	}
	if *groups > 0 {
		s.Groups = *groups
	}
	if *members > 0 {
		s.Members = *members
	}
	if *partitions > 0 {
		s.Partitions = *partitions
	}
	if *duration > 0 {
		s.DurationS = duration.Seconds()
	}
	flag.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "commit-interval":
			s.CommitIntervalS = *commitInterval
		case "ramp":
			s.RampS = ramp.Seconds()
		}
	})
	if s.CommitIntervalS < 0 || s.RampS < 0 {
		usage("-commit-interval and -ramp must not be negative")
	}
	if *protocol != "" {
		s.Protocol = *protocol
	}
	for _, h := range hookFlags {
		name, command, ok := strings.Cut(h, "=")
		if !ok || name == "" {
			usage(fmt.Sprintf("-hook %q: expected NAME=COMMAND", h))
		}
		s.Hooks[name] = command
	}
	s.HookNames = []string{}
	for name := range s.Hooks {
		s.HookNames = append(s.HookNames, name)
	}
	sort.Strings(s.HookNames)
	if *settle > 0 {
		s.SettleS = settle.Seconds()
	}
	if err := s.validate(); err != nil {
		usage(err.Error())
	}
	var targets []string
	for _, t := range strings.Split(*target, ",") {
		if t = strings.TrimSpace(t); t != "" {
			targets = append(targets, t)
		}
	}
	r := newRun(s, targets, !*quiet)
	result, err := r.run(context.Background())
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadtest: %v\n", err)
		os.Exit(1)
	}
	if err := os.MkdirAll(*output, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "loadtest: %v\n", err)
		os.Exit(1)
	}
	data, _ := json.MarshalIndent(result, "", "  ")
	path := filepath.Join(*output, "result.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "loadtest: %v\n", err)
		os.Exit(1)
	}
	inv := result["invariants"].(map[string]any)
	tts := result["time_to_stable"].(map[string]any)
	passed := inv["passed"].(bool)
	verdict := "passed"
	if !passed {
		verdict = "FAILED"
	}
	hb, found := result["rpcs"].(map[string]any)["ConsumerGroupHeartbeat"]
	if !found {
		hb = result["rpcs"].(map[string]any)["Heartbeat"]
	}
	p99 := 0.0
	if m, ok := hb.(map[string]any); ok {
		p99, _ = m["p99"].(float64)
	}
	fmt.Printf("%s: %d members, %.0f calls/s, heartbeat p99 %.1f ms, errors %d, time to Stable p50 %v s max %v s, loadgen CPU %.1f%% of a core; invariants %s (go driver)\n",
		s.Name, result["members"].(map[string]any)["total"], result["throughput_per_s"], p99,
		r.stats.errorCount(), tts["p50_s"], tts["max_s"], result["loadgen"].(map[string]any)["cpu_percent_of_one_core"], verdict)
	for _, v := range inv["violations"].([]map[string]any) {
		fmt.Printf("  violation: %v\n", v)
	}
	for _, u := range r.unstable {
		fmt.Printf("  not Stable by the end: %v\n", u)
	}
	fmt.Printf("wrote %s\n", path)
	if !passed {
		os.Exit(1)
	}
}

// hookList collects the repeatable -hook NAME=COMMAND.
type hookList []string

func (h *hookList) String() string     { return strings.Join(*h, " ") }
func (h *hookList) Set(v string) error { *h = append(*h, v); return nil }
