package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	gcv1 "github.com/groupcoord/groupcoord/gen/go/groupcoord/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Kafka error codes the driver acts on (and names in the result, as the Python driver does).
const (
	coordinatorLoadInProgress = 14
	coordinatorNotAvailable   = 15
	notCoordinator            = 16
	unknownMemberID           = 25
	fencedMemberEpoch         = 110
)

func errorName(code int32) string {
	if n, ok := errorNames[code]; ok {
		return n
	}
	return fmt.Sprintf("ERROR_%d", code)
}

// ---- routing ---------------------------------------------------------------------------

// router finds each group's shard with FindCoordinator and keeps one connection per shard.
type router struct {
	targets []string
	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn
	route   map[string]string
	stats   map[string]int
}

func (r *router) conn(address string) (*grpc.ClientConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.conns[address]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	r.conns[address] = c
	return c, nil
}

func (r *router) count(name string) {
	r.mu.Lock()
	r.stats[name]++
	r.mu.Unlock()
}

func (r *router) coordinator(ctx context.Context, group string) (gcv1.GroupCoordinatorClient, error) {
	r.mu.Lock()
	address, ok := r.route[group]
	r.mu.Unlock()
	if !ok {
		var last error = fmt.Errorf("no shard answered")
		for _, t := range r.targets {
			c, err := r.conn(t)
			if err != nil {
				last = err
				continue
			}
			r.count("lookups")
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := gcv1.NewGroupCoordinatorClient(c).FindCoordinator(actx,
				&gcv1.FindCoordinatorRequest{KeyType: 0, CoordinatorKeys: []string{group}})
			cancel()
			if err != nil {
				last = err
				continue
			}
			co := resp.GetCoordinators()[0]
			if co.GetErrorCode() != 0 {
				return nil, retriable{co.GetErrorCode()}
			}
			address = fmt.Sprintf("%s:%d", co.GetHost(), co.GetPort())
			r.mu.Lock()
			r.route[group] = address
			r.mu.Unlock()
			ok = true
			break
		}
		if !ok {
			return nil, last
		}
	}
	c, err := r.conn(address)
	if err != nil {
		return nil, err
	}
	return gcv1.NewGroupCoordinatorClient(c), nil
}

func (r *router) forget(group string) {
	r.mu.Lock()
	delete(r.route, group)
	r.mu.Unlock()
}

type retriable struct{ code int32 }

func (e retriable) Error() string { return "coordinator error " + errorName(e.code) }

// ---- the run ---------------------------------------------------------------------------

type change struct {
	kind string
	atS  float64
}

type group struct {
	name     string
	protocol string     // consumer (KIP-848) or classic
	mu       sync.Mutex // guards members, pending, starting
	members  []*member
	pending  []change
	starting int              // member starts under way (a ramp, a join): no Stable before they end
	last     map[int32]string // the previous Stable assignment (the watcher's)
}

func (g *group) memberList() []*member {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.members)
}

func (g *group) liveMembers() []*member {
	var out []*member
	for _, m := range g.memberList() {
		if m.live() {
			out = append(out, m)
		}
	}
	return out
}

type run struct {
	s         Scenario
	runID     string
	topic     string
	topicID   string
	router    *router
	stats     *stats
	owners    *ownership
	ledger    *ledger
	t0        time.Time
	groups    []*group // guarded by gmu
	groupSeq  int
	gmu       sync.Mutex
	ctx       context.Context // the members' and the events'
	watchCtx  context.Context
	watchers  sync.WaitGroup
	hooksRun  []map[string]any // guarded by mu
	eventsRun []map[string]any
	progress  bool
	tts       []map[string]any
	rebal     []map[string]any
	unstable  []map[string]any
	mu        sync.Mutex
	offsets   map[string]int64
	offsetsMu sync.Mutex
}

func newRun(s Scenario, targets []string, progress bool) *run {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	return &run{
		s: s, runID: id, topic: fmt.Sprintf("lt-%s-%s", id, s.Name),
		router:   &router{targets: targets, conns: map[string]*grpc.ClientConn{}, route: map[string]string{}, stats: map[string]int{}},
		stats:    newStats(),
		owners:   newOwnership(),
		ledger:   newLedger(),
		progress: progress,
		offsets:  map[string]int64{},
	}
}

func (r *run) elapsed() float64 { return time.Since(r.t0).Seconds() }

// call runs one RPC on the group's shard: re-routed on NOT_COORDINATOR /
// COORDINATOR_NOT_AVAILABLE and a shard that is gone, waiting on COORDINATOR_LOAD_IN_PROGRESS,
// within 20 s; its latency (retries included) and errors are recorded. nil when no answer.
func call[T proto.Message](r *run, ctx context.Context, rpc, group string, attempt time.Duration,
	send func(context.Context, gcv1.GroupCoordinatorClient) (T, error), topCode func(T) int32) (T, bool) {
	start := time.Now()
	second := int(start.Sub(r.t0).Seconds())
	deadline := start.Add(20 * time.Second)
	backoff := 50 * time.Millisecond
	var zero T
	last := "COORDINATOR_UNAVAILABLE_GAVE_UP"
	for time.Now().Before(deadline) {
		if ctx.Err() != nil {
			return zero, false // abandoned (a vanishing member): not an answer, not an error
		}
		client, err := r.router.coordinator(ctx, group)
		if err == nil {
			r.router.count("attempts")
			actx, cancel := context.WithTimeout(ctx, attempt)
			var resp T
			resp, err = send(actx, client)
			cancel()
			if err == nil {
				code := topCode(resp)
				if code != coordinatorLoadInProgress && code != coordinatorNotAvailable && code != notCoordinator {
					r.stats.record(rpc, second, time.Since(start))
					if code != 0 {
						r.stats.error(rpc, errorName(code), second)
					}
					return resp, true
				}
				err = retriable{code}
			}
		}
		if ctx.Err() != nil {
			return zero, false
		}
		if re, ok := err.(retriable); ok {
			if re.code == coordinatorLoadInProgress {
				r.router.count("load_in_progress")
			} else {
				r.router.forget(group)
				r.router.count("reroutes")
			}
		} else if st, ok := status.FromError(err); ok && (st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded || st.Code() == codes.Canceled) {
			r.router.forget(group)
			r.router.count("unavailable")
			last = "GRPC_" + st.Code().String()
		} else if ok {
			r.stats.record(rpc, second, time.Since(start))
			r.stats.error(rpc, "GRPC_"+st.Code().String(), second)
			return zero, false
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
	r.router.count("gave_up")
	r.stats.record(rpc, second, time.Since(start))
	r.stats.error(rpc, last, second)
	return zero, false
}

func (r *run) nextOffset(group string, p int32) int64 {
	key := fmt.Sprintf("%s/%d", group, p)
	r.offsetsMu.Lock()
	defer r.offsetsMu.Unlock()
	r.offsets[key] += 1 + int64(p&3)
	return r.offsets[key]
}

func (r *run) createTopic(ctx context.Context) error {
	var last error
	for i := 0; i < 40; i++ {
		c, err := r.router.conn(r.router.targets[i%len(r.router.targets)])
		if err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := gcv1.NewTopicCatalogClient(c).CreateTopics(actx, &gcv1.CreateTopicsRequest{
			Topics: []*gcv1.CreatableTopic{{Name: r.topic, NumPartitions: int32(r.s.Partitions)}},
		})
		cancel()
		if err != nil {
			last = err
			time.Sleep(250 * time.Millisecond)
			continue
		}
		t := resp.GetTopics()[0]
		if t.GetErrorCode() != 0 {
			return fmt.Errorf("CreateTopics %s: %s %s", r.topic, errorName(t.GetErrorCode()), t.GetErrorMessage())
		}
		r.topicID = t.GetTopicId()
		return nil
	}
	return fmt.Errorf("cannot create the topic on %v: %v", r.router.targets, last)
}

func (r *run) run(ctx context.Context) (map[string]any, error) {
	if err := r.createTopic(ctx); err != nil {
		return nil, err
	}
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	wall0 := time.Now().UTC()
	r.t0 = time.Now()
	r.ctx = ctx
	watchCtx, stopWatch := context.WithCancel(ctx)
	r.watchCtx = watchCtx
	for gi := 0; gi < r.s.Groups; gi++ {
		r.addGroup()
	}
	for _, g := range r.groupList() {
		r.change(g, "initial_join")
	}
	var lagMax time.Duration
	lagDone, lagStopped := make(chan struct{}), make(chan struct{})
	go func() { // how late the Go scheduler wakes a sleeper (the event-loop lag's equivalent)
		defer close(lagStopped)
		for {
			select {
			case <-lagDone:
				return
			default:
			}
			t := time.Now()
			time.Sleep(50 * time.Millisecond)
			if lag := time.Since(t) - 50*time.Millisecond; lag > lagMax {
				lagMax = lag
			}
		}
	}()
	var starting sync.WaitGroup // every group's members, each group spread over ramp_s
	for _, g := range r.groupList() {
		starting.Add(1)
		go func() { defer starting.Done(); r.startMembers(g, g.memberList(), r.s.RampS) }()
	}
	starting.Wait()
	timelineDone := make(chan struct{})
	go func() { defer close(timelineDone); r.timeline() }()
	end := r.t0.Add(time.Duration(r.s.DurationS * float64(time.Second)))
	for time.Now().Before(end) {
		time.Sleep(min(time.Until(end), 5*time.Second))
		if r.progress {
			fmt.Fprintf(os.Stderr, "%6.1fs  members %d  calls %d  errors %d  open changes %d\n",
				r.elapsed(), r.liveCount(), r.stats.total(), r.stats.errorCount(), r.pendingCount())
		}
	}
	<-timelineDone // events still running finish first
	runEnd := r.elapsed()
	settleEnd := time.Now().Add(time.Duration(r.s.SettleS * float64(time.Second)))
	for r.pendingCount() > 0 && time.Now().Before(settleEnd) {
		time.Sleep(100 * time.Millisecond)
	}
	for _, g := range r.groupList() {
		g.mu.Lock()
		for _, c := range g.pending {
			r.unstable = append(r.unstable, map[string]any{"group": g.name, "change": c.kind, "at_s": round(c.atS, 3)})
		}
		g.mu.Unlock()
	}
	measured := r.elapsed()
	var ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	var all, live []*member
	for _, g := range r.groupList() {
		all = append(all, g.memberList()...)
		live = append(live, g.liveMembers()...)
	}
	stopWatch()
	r.watchers.Wait()
	var closing sync.WaitGroup // close: commit, revoke, leave
	for _, m := range live {
		closing.Add(1)
		go func() { defer closing.Done(); m.close() }()
	}
	closing.Wait()
	close(lagDone)
	<-lagStopped
	violations := r.owners.finish()
	keysChecked := 0
	for _, g := range r.groupList() {
		v, n := r.checkCommits(ctx, g.name)
		violations = append(violations, v...)
		keysChecked += n
	}
	wall1 := time.Now()
	var groupNames []string
	for _, g := range r.groupList() {
		groupNames = append(groupNames, g.name)
	}
	sort.Strings(groupNames)
	cpu := tv(ru1.Utime) - tv(ru0.Utime) + tv(ru1.Stime) - tv(ru0.Stime)
	members := len(all)
	moved, movedMax := 0, 0
	for _, rb := range r.rebal {
		n := rb["partitions_moved"].(int)
		moved += n
		movedMax = max(movedMax, n)
	}
	vs := violations
	if len(vs) > 200 {
		vs = vs[:200]
	}
	if vs == nil {
		vs = []map[string]any{}
	}
	result := map[string]any{
		"format":            "groupcoord-loadtest/1",
		"driver":            "go",
		"run_id":            r.runID,
		"scenario":          r.s,
		"target":            r.router.targets,
		"wire":              "grpc",
		"started_at":        wall0.Format("2006-01-02T15:04:05Z"),
		"duration_s":        round(runEnd, 3),
		"measured_s":        round(measured, 3),
		"members":           map[string]any{"total": members, "live_at_end": len(live)},
		"groups":            groupNames,
		"history_window_ms": map[string]any{"from": wall0.UnixMilli(), "to": wall1.UnixMilli() + 1},
		"time_to_stable": func() map[string]any {
			out := ttsSummary(r.tts)
			out["changes"] = nonNil(r.tts)
			out["unstable"] = nonNil(r.unstable)
			return out
		}(),
		"rebalances": map[string]any{
			"list": nonNil(r.rebal), "count": len(r.rebal),
			"partitions_moved_total": moved, "partitions_moved_max": movedMax,
		},
		"invariants": map[string]any{
			"passed":               len(violations) == 0 && len(r.unstable) == 0,
			"violations":           vs,
			"violation_count":      len(violations),
			"ownership_acquired":   r.owners.acquired,
			"fenced_overlaps":      r.owners.fencedOverlaps,
			"commits_acknowledged": r.ledger.acked,
			"commit_keys_checked":  keysChecked,
			"all_groups_stable":    len(r.unstable) == 0,
		},
		"client": r.router.stats,
		"hooks":  nonNil(r.hooksRun),
		"events": nonNil(r.eventsRun),
		"loadgen": map[string]any{
			"cpu_s":                   round(cpu, 3),
			"cpu_percent_of_one_core": round(100*cpu/measured, 1),
			"cpu_ms_per_member_per_s": round(1000*cpu/measured/float64(max(1, members)), 4),
			"loop_lag_max_ms":         round(float64(lagMax)/1e6, 1),
			"max_rss_mb":              round(float64(ru1.Maxrss)/1024, 1),
			"saturated":               cpu/measured > 0.9*float64(runtime.NumCPU()) || lagMax > 200*time.Millisecond,
			"go":                      runtime.Version(),
			"gomaxprocs":              runtime.GOMAXPROCS(0),
		},
	}
	for k, v := range r.stats.asMap(measured) {
		result[k] = v
	}
	return result, nil
}

func nonNil(xs []map[string]any) []map[string]any {
	if xs == nil {
		return []map[string]any{}
	}
	return xs
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

func ttsSummary(changes []map[string]any) map[string]any {
	var secs []float64
	for _, c := range changes {
		secs = append(secs, c["seconds"].(float64))
	}
	if len(secs) == 0 {
		return map[string]any{"count": 0}
	}
	sort.Float64s(secs)
	pct := func(p float64) float64 { return secs[min(len(secs)-1, int(p/100*float64(len(secs))))] }
	return map[string]any{"count": len(secs), "p50_s": pct(50), "p90_s": pct(90), "p99_s": pct(99), "max_s": secs[len(secs)-1]}
}

func (r *run) pendingCount() int {
	n := 0
	for _, g := range r.groupList() {
		g.mu.Lock()
		n += len(g.pending)
		g.mu.Unlock()
	}
	return n
}

// watch describes the group every 100 ms while a change is open, until it is Stable: state
// Stable, assignment epoch = group epoch, exactly the simulated members, each at the group
// epoch with assignment = target, each simulated member owning just that.
func (r *run) watch(ctx context.Context, g *group) {
	for ctx.Err() == nil {
		g.mu.Lock()
		open := len(g.pending) > 0
		g.mu.Unlock()
		if open {
			if observed := r.stable(ctx, g); observed != nil {
				now := r.elapsed()
				moved := len(observed)
				if g.last != nil {
					moved = 0
					for p, m := range observed {
						if g.last[p] != m {
							moved++
						}
					}
				}
				g.last = observed
				r.mu.Lock()
				r.rebal = append(r.rebal, map[string]any{"group": g.name, "at_s": round(now, 3), "partitions_moved": moved})
				g.mu.Lock()
				for _, c := range g.pending {
					r.tts = append(r.tts, map[string]any{
						"group": g.name, "protocol": g.protocol, "change": c.kind, "at_s": round(c.atS, 3),
						"seconds": round(now-c.atS, 4), "partitions_moved": moved,
					})
				}
				g.pending = nil
				g.mu.Unlock()
				r.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (r *run) stable(ctx context.Context, g *group) map[int32]string {
	if g.protocol == "classic" {
		return r.stableClassic(ctx, g)
	}
	g.mu.Lock()
	busy := g.starting > 0
	g.mu.Unlock()
	if busy {
		return nil
	}
	byID := map[string]*member{}
	for _, m := range g.liveMembers() {
		id, _, _ := m.snapshot()
		if id == "" {
			return nil
		}
		byID[id] = m
	}
	if len(byID) == 0 {
		return nil
	}
	resp, ok := call(r, ctx, "ConsumerGroupDescribe", g.name, 5*time.Second,
		func(c context.Context, client gcv1.GroupCoordinatorClient) (*gcv1.ConsumerGroupDescribeResponse, error) {
			return client.ConsumerGroupDescribe(c, &gcv1.ConsumerGroupDescribeRequest{GroupIds: []string{g.name}})
		},
		func(x *gcv1.ConsumerGroupDescribeResponse) int32 {
			if len(x.GetGroups()) == 0 {
				return 0
			}
			return x.GetGroups()[0].GetErrorCode()
		})
	if !ok || len(resp.GetGroups()) == 0 {
		return nil
	}
	d := resp.GetGroups()[0]
	if d.GetErrorCode() != 0 || !strings.EqualFold(d.GetGroupState(), "stable") ||
		d.GetAssignmentEpoch() != d.GetGroupEpoch() || len(d.GetMembers()) != len(byID) {
		return nil
	}
	out := map[int32]string{}
	for _, dm := range d.GetMembers() {
		sim, ok := byID[dm.GetMemberId()]
		if !ok || dm.GetMemberEpoch() != d.GetGroupEpoch() {
			return nil
		}
		have := parts(dm.GetAssignment())
		want := parts(dm.GetTargetAssignment())
		_, epoch, owned := sim.snapshot()
		if !slices.Equal(have, want) || !slices.Equal(owned, have) || epoch != d.GetGroupEpoch() {
			return nil
		}
		for _, p := range have {
			out[p] = sim.name
		}
	}
	if len(out) != r.s.Partitions {
		return nil // Stable with partitions unassigned: the topic not yet seen
	}
	return out
}

func parts(ts []*gcv1.DescribedTopicPartitions) []int32 {
	var out []int32
	for _, t := range ts {
		out = append(out, t.GetPartitions()...)
	}
	slices.Sort(out)
	return out
}

// checkCommits reads the group's offsets back (after every member closed): each is the last
// acknowledged value, or one sent after it whose outcome is unknown.
func (r *run) checkCommits(ctx context.Context, groupName string) ([]map[string]any, int) {
	keys := r.ledger.keysOf(groupName)
	if len(keys) == 0 {
		return nil, 0
	}
	resp, ok := call(r, ctx, "OffsetFetch", groupName, 60*time.Second,
		func(c context.Context, client gcv1.GroupCoordinatorClient) (*gcv1.OffsetFetchResponse, error) {
			return client.OffsetFetch(c, &gcv1.OffsetFetchRequest{Groups: []*gcv1.OffsetFetchRequestGroup{{GroupId: groupName}}})
		},
		func(x *gcv1.OffsetFetchResponse) int32 { return x.GetGroups()[0].GetErrorCode() })
	if !ok || resp.GetGroups()[0].GetErrorCode() != 0 {
		return []map[string]any{{"kind": "commit-unreadable", "group": groupName}}, len(keys)
	}
	stored := map[int32]int64{}
	for _, t := range resp.GetGroups()[0].GetTopics() {
		for _, p := range t.GetPartitions() {
			if p.GetErrorCode() == 0 && p.GetCommittedOffset() >= 0 {
				stored[p.GetPartitionIndex()] = p.GetCommittedOffset()
			}
		}
	}
	return r.ledger.check(groupName, stored), len(keys)
}
