package member

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gcv1 "github.com/groupcoord/groupcoord/gen/go/groupcoord/v1"
)

func tps(topic string, ps ...int32) []TopicPartition {
	var out []TopicPartition
	for _, p := range ps {
		out = append(out, TopicPartition{topic, p})
	}
	return out
}

func TestMinusIsRevokedAndAdded(t *testing.T) {
	owned := append(tps("a", 0, 1, 2), tps("b", 0)...)
	target := append(tps("a", 2, 3), tps("b", 0)...)
	if got, want := minus(owned, target), tps("a", 0, 1); !slices.Equal(got, want) {
		t.Fatalf("revoked %v, want %v", got, want)
	}
	if got, want := minus(target, owned), tps("a", 3); !slices.Equal(got, want) {
		t.Fatalf("added %v, want %v", got, want)
	}
	if got := minus(nil, target); got != nil {
		t.Fatalf("nothing owned, revoked %v", got)
	}
}

func TestBackoffIsBoundedExponentialWithJitter(t *testing.T) {
	b := newBackoff()
	var waits []time.Duration
	for range 12 {
		waits = append(waits, b.next())
	}
	if waits[0] < 50*time.Millisecond || waits[0] > 100*time.Millisecond {
		t.Fatalf("first wait %v, want within [50ms, 100ms]", waits[0])
	}
	for _, w := range waits {
		if w > 5*time.Second {
			t.Fatalf("wait %v over the 5 s cap", w)
		}
	}
	if waits[11] < 2500*time.Millisecond { // capped at 5 s, jittered down to half at most
		t.Fatalf("wait %v after 12 failures, want >= 2.5 s", waits[11])
	}
	b.reset()
	if w := b.next(); w > 100*time.Millisecond {
		t.Fatalf("after reset %v, want <= 100ms", w)
	}
}

func TestMemberIDIsAUUIDInKafkaBase64(t *testing.T) {
	m, err := New(Config{Bootstrap: []string{"127.0.0.1:1"}, GroupID: "g", Topics: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(m.ID())
	if len(m.ID()) != 22 || err != nil || len(raw) != 16 || raw[6]>>4 != 4 {
		t.Fatalf("member id %q (%v)", m.ID(), err)
	}
	other, _ := New(Config{Bootstrap: []string{"127.0.0.1:1"}, GroupID: "g", Topics: []string{"t"}})
	if other.ID() == m.ID() {
		t.Fatal("two members with one id")
	}
}

func TestNewRefusesIncompleteConfigs(t *testing.T) {
	for _, cfg := range []Config{
		{GroupID: "g", Topics: []string{"t"}},
		{Bootstrap: []string{"x:1"}, Topics: []string{"t"}},
		{Bootstrap: []string{"x:1"}, GroupID: "g"},
		{Bootstrap: []string{"x:1"}, GroupID: "g", Topics: []string{"t"}, TopicRegex: "t.*"},
		{Bootstrap: []string{"x:1"}, GroupID: "g", Topics: []string{"t"}, TLS: &TLSConfig{CertFile: "c"}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// Nothing listens on the bootstrap address: Commit retries FindCoordinator with backoff
// until its context ends, and returns the error then.
func TestCallRetriesAnUnreachableCoordinatorUntilTheContextEnds(t *testing.T) {
	m, err := New(Config{Bootstrap: []string{"127.0.0.1:1"}, GroupID: "g", Topics: []string{"t"},
		RequestTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.closeConns()
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = m.Describe(ctx)
	if err == nil || ctx.Err() == nil {
		t.Fatalf("Describe with no server: %v", err)
	}
	if el := time.Since(start); el < 550*time.Millisecond || el > 2*time.Second {
		t.Fatalf("gave up after %v, want at the context's end (600 ms)", el)
	}
}

type panicky struct{}

func (panicky) Name() string              { return "p" }
func (panicky) Versions() (int32, int32)  { return 0, 0 }
func (panicky) Metadata() (int32, []byte) { return 0, nil }
func (panicky) Assign(context.Context, GroupSpec) (map[string]MemberAssignment, error) {
	panic("boom")
}

// An assignor that panics, or none of the group's assignor name: an error (the member then
// installs error = 1 so that another member computes), never a crash.
func TestAssignTurnsAPanicOrAMissingAssignorIntoAnError(t *testing.T) {
	m, err := New(Config{Bootstrap: []string{"127.0.0.1:1"}, GroupID: "g", Topics: []string{"t"},
		Assignors: []Assignor{panicky{}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.assign(context.Background(), GroupSpec{AssignorName: "p"}); err == nil ||
		!strings.Contains(err.Error(), "panicked: boom") {
		t.Fatalf("panic: %v", err)
	}
	if _, err := m.assign(context.Background(), GroupSpec{AssignorName: "q"}); err == nil ||
		!strings.Contains(err.Error(), `no client-side assignor named "q"`) {
		t.Fatalf("missing: %v", err)
	}
	decl := m.clientAssignors().GetAssignors()
	if len(decl) != 1 || decl[0].GetName() != "p" {
		t.Fatalf("declared %v", decl)
	}
}

// After Close the member's calls answer ErrClosed (no new connections to a group it left).
func TestCallsAfterCloseAreErrClosed(t *testing.T) {
	m, err := New(Config{Bootstrap: []string{"127.0.0.1:1"}, GroupID: "g", Topics: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Commit(context.Background(), map[TopicPartition]int64{{"t", 0}: 1}); err != ErrClosed {
		t.Fatalf("Commit after Close: %v", err)
	}
	if err := m.Start(context.Background()); err == nil {
		t.Fatal("Start after Close accepted")
	}
}

// recorder is a Listener that logs its calls; OnRevoked blocks until release is closed.
type recorder struct {
	mu      sync.Mutex
	calls   []string
	revoke  chan struct{} // closed when OnRevoked starts
	release chan struct{}
}

func (r *recorder) log(kind string, tps []TopicPartition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf("%s%v", kind, tps))
}

func (r *recorder) OnAssigned(_ context.Context, tps []TopicPartition) { r.log("assigned", tps) }
func (r *recorder) OnLost(_ context.Context, tps []TopicPartition)     { r.log("lost", tps) }
func (r *recorder) OnRevoked(_ context.Context, tps []TopicPartition) {
	close(r.revoke)
	<-r.release
	r.log("revoked", tps)
}

func (r *recorder) log0() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// reconcilingMember: a member whose topic "t" has id "T" (cached: no RPC), owning t-0, t-1.
func reconcilingMember(t *testing.T, l Listener) *Member {
	m, err := New(Config{Bootstrap: []string{"127.0.0.1:1"}, GroupID: "g", Topics: []string{"t"}, Listener: l})
	if err != nil {
		t.Fatal(err)
	}
	m.topicNames["T"], m.topicIDs["t"] = "t", "T"
	m.owned, m.acked, m.epoch = tps("t", 0, 1), true, 5
	return m
}

// While OnRevoked blocks, what the heartbeats report (m.owned) is the old set, with no added
// partition; once it returns, the owned set shrinks and a heartbeat is asked for at once, and
// only then are the added partitions assigned.
func TestRevocationCompletesBeforeAssignmentAndHeartbeatsReportTheOldSet(t *testing.T) {
	l := &recorder{revoke: make(chan struct{}), release: make(chan struct{})}
	m := reconcilingMember(t, l)
	m.target, m.hasTarget = []*gcv1.TopicPartitions{{TopicId: "T", Partitions: []int32{1, 2}}}, true
	ctx := context.Background()
	stepped := make(chan bool)
	go func() { stepped <- m.reconcileStep(ctx, ctx) }()
	<-l.revoke
	if got := m.Assignment(); !slices.Equal(got, tps("t", 0, 1)) {
		t.Fatalf("owned during the revocation %v, want the old set", got)
	}
	select {
	case <-m.beatNow:
		t.Fatal("a heartbeat asked for before the revocation completed")
	default:
	}
	close(l.release)
	if !<-stepped {
		t.Fatal("the revocation was not a step")
	}
	if got := m.Assignment(); !slices.Equal(got, tps("t", 1)) {
		t.Fatalf("owned after the revocation %v, want t-1", got)
	}
	select {
	case <-m.beatNow:
	default:
		t.Fatal("no heartbeat asked for after the revocation")
	}
	if !m.reconcileStep(ctx, ctx) || m.reconcileStep(ctx, ctx) {
		t.Fatal("want one assignment step, then nothing")
	}
	if got, want := l.log0(), []string{"revoked[t-0]", "assigned[t-2]"}; !slices.Equal(got, want) {
		t.Fatalf("callbacks %v, want %v", got, want)
	}
	if got := m.Assignment(); !slices.Equal(got, tps("t", 1, 2)) {
		t.Fatalf("owned %v, want t-1, t-2", got)
	}
}

// Fenced while OnRevoked blocks: the callback finishes, then OnLost(what is left), and the
// new target's partitions are never assigned.
func TestFencedDuringARevocationLosesTheRestAfterIt(t *testing.T) {
	l := &recorder{revoke: make(chan struct{}), release: make(chan struct{})}
	m := reconcilingMember(t, l)
	m.target, m.hasTarget = []*gcv1.TopicPartitions{{TopicId: "T", Partitions: []int32{1, 2}}}, true
	ctx := context.Background()
	stepped := make(chan bool)
	go func() {
		for m.reconcileStep(ctx, ctx) {
		}
		stepped <- true
	}()
	<-l.revoke
	m.mu.Lock() // what the heartbeat loop does on FENCED_MEMBER_EPOCH
	m.fenced, m.epoch, m.lostDone = true, 0, make(chan struct{})
	lost := m.lostDone
	m.mu.Unlock()
	close(l.release)
	<-stepped
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("OnLost did not complete")
	}
	if got, want := l.log0(), []string{"revoked[t-0]", "lost[t-1]"}; !slices.Equal(got, want) {
		t.Fatalf("callbacks %v, want %v", got, want)
	}
	if got := m.Assignment(); len(got) != 0 || m.hasTarget || m.acked {
		t.Fatalf("after the fencing: owned %v, target %v, acked %v", got, m.hasTarget, m.acked)
	}
}

// Heartbeats carry only what changed: the join and the heartbeat after a failure carry the
// full state; otherwise the subscription etc. are left out and owned partitions are sent
// only when they differ from the last report; a leave carries only the identity.
func TestHeartbeatsCarryOnlyWhatChanged(t *testing.T) {
	m, err := New(Config{Bootstrap: []string{"127.0.0.1:1"}, GroupID: "g", Topics: []string{"t"},
		RackID: "r1", InstanceID: "i1", ServerAssignor: "uniform", Assignors: []Assignor{panicky{}}})
	if err != nil {
		t.Fatal(err)
	}
	m.topicIDs["t"] = "T"
	full := func(req *gcv1.ConsumerGroupHeartbeatRequest) bool {
		return req.RebalanceTimeoutMs != nil && req.RackId != nil && req.ServerAssignor != nil &&
			req.SubscribedTopicNames != nil && req.ClientAssignors != nil && req.TopicPartitions != nil
	}
	var last sent
	join := m.request(&last, 0, nil, false)
	if !full(join) || join.GetInstanceId() != "i1" || len(join.GetTopicPartitions().GetTopicPartitions()) != 0 {
		t.Fatalf("join %v", join)
	}
	last = sent{valid: true, assignors: join.ClientAssignors}
	same := m.request(&last, 3, nil, false)
	if same.RebalanceTimeoutMs != nil || same.RackId != nil || same.ServerAssignor != nil ||
		same.SubscribedTopicNames != nil || same.SubscribedTopicRegex != nil ||
		same.ClientAssignors != nil || same.TopicPartitions != nil || same.GetInstanceId() != "i1" {
		t.Fatalf("unchanged state sent: %v", same)
	}
	moved := m.request(&last, 3, tps("t", 0, 2), false)
	if got := moved.GetTopicPartitions().GetTopicPartitions(); len(got) != 1 ||
		got[0].GetTopicId() != "T" || !slices.Equal(got[0].GetPartitions(), []int32{0, 2}) || moved.RackId != nil {
		t.Fatalf("owned change: %v", moved)
	}
	if again := m.request(&last, 3, tps("t", 0, 2), true); !full(again) {
		t.Fatalf("a retry after a failure is not full: %v", again)
	}
	if invalid := m.request(&sent{}, 3, nil, false); !full(invalid) {
		t.Fatalf("after an error the state is not sent again: %v", invalid)
	}
	if leave := m.request(&last, -2, tps("t", 0), true); leave.TopicPartitions != nil ||
		leave.SubscribedTopicNames != nil || leave.GetInstanceId() != "i1" || leave.GetMemberEpoch() != -2 {
		t.Fatalf("leave %v", leave)
	}
}
