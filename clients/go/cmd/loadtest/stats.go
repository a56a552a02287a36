package main

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
)

// stats keeps every latency (µs) per RPC and per second: exact percentiles (the Python
// driver's HDR histograms keep 3 significant digits; at these call counts the samples fit).
type stats struct {
	mu        sync.Mutex
	lat       map[string][]int64
	perSecond map[int]map[string][]int64
	errors    map[[2]string]int
	errPerSec map[int]int
	calls     int
}

func newStats() *stats {
	return &stats{lat: map[string][]int64{}, perSecond: map[int]map[string][]int64{},
		errors: map[[2]string]int{}, errPerSec: map[int]int{}}
}

func (s *stats) record(rpc string, second int, d time.Duration) {
	us := max(1, d.Microseconds())
	s.mu.Lock()
	s.lat[rpc] = append(s.lat[rpc], us)
	sec := s.perSecond[second]
	if sec == nil {
		sec = map[string][]int64{}
		s.perSecond[second] = sec
	}
	sec[rpc] = append(sec[rpc], us)
	s.calls++
	s.mu.Unlock()
}

func (s *stats) error(rpc, name string, second int) {
	s.mu.Lock()
	s.errors[[2]string{rpc, name}]++
	s.errPerSec[second]++
	s.mu.Unlock()
}

func (s *stats) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func (s *stats) errorCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.errors {
		n += c
	}
	return n
}

func pctMs(sorted []int64, p float64) float64 {
	i := int(p / 100 * float64(len(sorted)))
	return float64(sorted[min(len(sorted)-1, i)]) / 1000
}

func summaryMs(samples []int64) map[string]any {
	if len(samples) == 0 {
		return map[string]any{"count": 0}
	}
	xs := slices.Clone(samples)
	slices.Sort(xs)
	var sum int64
	for _, x := range xs {
		sum += x
	}
	return map[string]any{
		"count": len(xs), "p50": pctMs(xs, 50), "p90": pctMs(xs, 90), "p99": pctMs(xs, 99),
		"p99_9": pctMs(xs, 99.9), "max": float64(xs[len(xs)-1]) / 1000,
		"mean": round(float64(sum)/float64(len(xs))/1000, 3),
	}
}

// asMap: the result's measurement fields, as loadtest/stats.py writes them.
func (s *stats) asMap(elapsed float64) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	rpcs := map[string]any{}
	names := make([]string, 0, len(s.lat))
	for rpc := range s.lat {
		names = append(names, rpc)
	}
	sort.Strings(names)
	for _, rpc := range names {
		m := summaryMs(s.lat[rpc])
		errs := 0
		for k, n := range s.errors {
			if k[0] == rpc {
				errs += n
			}
		}
		m["errors"] = errs
		m["rate_per_s"] = float64(len(s.lat[rpc])) / elapsed
		rpcs[rpc] = m
	}
	errors := map[string]int{}
	byRPC := map[string]int{}
	for k, n := range s.errors {
		errors[k[1]] += n
		byRPC[fmt.Sprintf("%s:%s", k[0], k[1])] += n
	}
	last := -1
	for sec := range s.perSecond {
		last = max(last, sec)
	}
	ts := make([]int, last+1)
	calls := map[string][]int{}
	p99 := map[string][]any{}
	errSeries := make([]int, last+1)
	for sec := 0; sec <= last; sec++ {
		ts[sec] = sec
		errSeries[sec] = s.errPerSec[sec]
		for _, rpc := range names {
			xs := s.perSecond[sec][rpc]
			calls[rpc] = append(calls[rpc], len(xs))
			if len(xs) == 0 {
				p99[rpc] = append(p99[rpc], nil)
			} else {
				ys := slices.Clone(xs)
				slices.Sort(ys)
				p99[rpc] = append(p99[rpc], pctMs(ys, 99))
			}
		}
	}
	return map[string]any{
		"calls":             s.calls,
		"warmup_s":          0.0,
		"rpcs_after_warmup": map[string]any{},
		"throughput_per_s":  float64(s.calls) / elapsed,
		"rpcs":              rpcs,
		"errors":            errors,
		"errors_by_rpc":     byRPC,
		"timeseries":        map[string]any{"t_s": ts, "calls": calls, "p99_ms": p99, "errors": errSeries},
	}
}

// ---- invariants ------------------------------------------------------------------------

// ownership: no partition owned by two members of one group at once, except Kafka's case of a
// member fenced before it knew (the overlap stays suspect until the old holder's next answer).
type ownership struct {
	mu             sync.Mutex
	owner          map[string]string // group/partition -> member
	suspect        map[string][]map[string]any
	violations     []map[string]any
	fencedOverlaps int
	acquired       int
}

func newOwnership() *ownership {
	return &ownership{owner: map[string]string{}, suspect: map[string][]map[string]any{}}
}

func (o *ownership) acquire(group, member string, p int32, at float64) {
	key := fmt.Sprintf("%s/%d", group, p)
	o.mu.Lock()
	defer o.mu.Unlock()
	if holder, ok := o.owner[key]; ok && holder != member {
		k := group + "\x00" + holder
		o.suspect[k] = append(o.suspect[k], map[string]any{
			"kind": "double-ownership", "group": group, "at_s": round(at, 3),
			"detail": fmt.Sprintf("partition %d given to %s while %s still owns it", p, member, holder),
		})
	}
	o.owner[key] = member
	o.acquired++
}

func (o *ownership) release(group, member string, p int32) {
	key := fmt.Sprintf("%s/%d", group, p)
	o.mu.Lock()
	if o.owner[key] == member {
		delete(o.owner, key)
	}
	o.mu.Unlock()
}

func (o *ownership) fenced(group, member string) {
	o.mu.Lock()
	k := group + "\x00" + member
	o.fencedOverlaps += len(o.suspect[k])
	delete(o.suspect, k)
	o.mu.Unlock()
}

func (o *ownership) confirmed(group, member string) {
	o.mu.Lock()
	k := group + "\x00" + member
	o.violations = append(o.violations, o.suspect[k]...)
	delete(o.suspect, k)
	o.mu.Unlock()
}

func (o *ownership) finish() []map[string]any {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, vs := range o.suspect {
		o.violations = append(o.violations, vs...)
		delete(o.suspect, k)
	}
	return o.violations
}

// ledger: every acknowledged commit reads back (the last acknowledged value, or one sent after
// it whose outcome is unknown).
type ledger struct {
	mu     sync.Mutex
	acks   map[string]map[int32]int64
	unsure map[string]map[int32][]int64
	acked  int
}

func newLedger() *ledger {
	return &ledger{acks: map[string]map[int32]int64{}, unsure: map[string]map[int32][]int64{}}
}

func (l *ledger) sent(group string, p int32, v int64) {
	l.mu.Lock()
	if l.unsure[group] == nil {
		l.unsure[group] = map[int32][]int64{}
	}
	l.unsure[group][p] = append(l.unsure[group][p], v)
	l.mu.Unlock()
}

func (l *ledger) acknowledged(group string, p int32, v int64) {
	l.mu.Lock()
	if l.acks[group] == nil {
		l.acks[group] = map[int32]int64{}
	}
	l.acks[group][p] = v
	l.unsure[group][p] = nil
	l.acked++
	l.mu.Unlock()
}

func (l *ledger) refused(group string, p int32, v int64) {
	l.mu.Lock()
	l.unsure[group][p] = slices.DeleteFunc(l.unsure[group][p], func(x int64) bool { return x == v })
	l.mu.Unlock()
}

func (l *ledger) keysOf(group string) []int32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int32
	for p := range l.unsure[group] {
		out = append(out, p)
	}
	return out
}

func (l *ledger) check(group string, stored map[int32]int64) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for p, unknown := range l.unsure[group] {
		acked, hasAck := l.acks[group][p]
		got, hasGot := stored[p]
		if !hasAck && len(unknown) == 0 {
			continue
		}
		if (hasGot && (hasAck && got == acked || slices.Contains(unknown, got))) || (!hasGot && !hasAck) {
			continue
		}
		out = append(out, map[string]any{
			"kind": "commit-lost", "group": group,
			"detail": fmt.Sprintf("partition %d: acknowledged %d, read back %v (present %v)", p, acked, got, hasGot),
		})
	}
	return out
}
