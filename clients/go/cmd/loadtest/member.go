package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	gm "github.com/groupcoord/groupcoord/clients/go/member"
	gcv1 "github.com/groupcoord/groupcoord/gen/go/groupcoord/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// member is one simulated consumer: a KIP-848 member of the member library
// (clients/go/member: heartbeats, reconciliation, fencing, routing) whose callbacks commit
// and give up revoked partitions and take assigned ones, or a classic one
// (JoinGroup/SyncGroup/Heartbeat, classic.go, in a goroutine) in a classic group.
type member struct {
	r          *run
	classic    bool
	group      string
	index      int
	name       string
	instanceID string
	mu         sync.Mutex // guards id, epoch, owned, started, closed, lib (read by the group's watcher)
	lib        *gm.Member // KIP-848: the library's member of this incarnation
	commitMu   sync.Mutex // one commit at a time (the ledger's values in order)
	id         string
	epoch      int32   // classic: the generation synced at (KIP-848: lib.Epoch())
	generation int32   // classic: the generation of the last join (commits carry it)
	owned      []int32 // sorted partitions of the run's topic
	started    bool    // a goroutine was started at least once
	closed     bool    // closed (left) or vanished, and not started again
	vanishing  bool    // stop without committing or leaving
	lastCommit time.Time
	stop       chan struct{}
	done       chan struct{}
	cancel     context.CancelFunc // aborts the incarnation's calls (vanish)
	incarn     int
}

func newMember(r *run, g *group, i int, static bool) *member {
	m := &member{r: r, group: g.name, index: i, name: fmt.Sprintf("%s-m%d", g.name, i),
		classic: g.protocol == "classic"}
	if static {
		m.instanceID = fmt.Sprintf("%s-i%d", g.name, i)
	}
	return m
}

func (m *member) snapshot() (string, int32, []int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lib != nil {
		return m.lib.ID(), m.lib.Epoch(), slices.Clone(m.owned)
	}
	return m.id, m.epoch, slices.Clone(m.owned)
}

// live: started and neither closed nor vanished (the watcher's "live simulated members").
func (m *member) live() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.started && !m.closed
}

// start runs a new incarnation: a new member id, epoch 0 (a static member keeps its instance id).
func (m *member) start(ctx context.Context) {
	m.incarn++
	mctx, cancel := context.WithCancel(ctx)
	m.mu.Lock()
	m.id = fmt.Sprintf("%s-%d-%08x", m.name, m.incarn, rand.Uint32())
	if m.classic {
		m.id = "" // the coordinator gives it (MEMBER_ID_REQUIRED)
	}
	m.epoch = 0
	m.generation = -1
	m.started, m.closed, m.vanishing = true, false, false
	m.mu.Unlock()
	m.cancel = cancel
	m.stop = make(chan struct{})
	m.done = make(chan struct{})
	m.lastCommit = time.Now() // auto-commit timers start with the consumer
	if m.classic {
		go func() {
			defer close(m.done)
			m.classicLoop(mctx)
		}()
		return
	}
	lib, err := gm.New(gm.Config{
		Bootstrap: m.r.router.targets, GroupID: m.group, Topics: []string{m.r.topic},
		InstanceID: m.instanceID, ClientID: "loadtest-go",
		RebalanceTimeout: time.Duration(m.r.s.RebalanceTimeoutMs) * time.Millisecond,
		Listener:         listener{m, mctx}, Dial: m.r.router.conn, Observe: m.observe,
	})
	if err != nil {
		panic(err) // a config the scenario made: a bug here
	}
	m.mu.Lock()
	m.lib = lib
	m.mu.Unlock()
	// (ended by close or vanish, never by a cancellation: that would leave the group)
	_ = lib.Start(context.Background())
	go func() { // auto-commit of what it owns, every commit_interval_s
		defer close(m.done)
		every := time.Duration(m.r.s.CommitIntervalS * float64(time.Second))
		for {
			wait := time.Hour
			if every > 0 {
				wait = max(0, every-time.Since(m.lastCommitTime()))
			}
			select {
			case <-m.stop:
				return
			case <-time.After(wait):
			}
			if _, epoch, owned := m.snapshot(); len(owned) > 0 && epoch > 0 {
				m.commit(mctx, owned)
			} else {
				m.setLastCommit()
			}
		}
	}()
}

// listener: the library's callbacks for one incarnation (on its reconciliation goroutine).
type listener struct {
	m   *member
	ctx context.Context // the incarnation's: vanish abandons its calls
}

func partitionsOf(tps []gm.TopicPartition) []int32 {
	out := make([]int32, 0, len(tps))
	for _, tp := range tps {
		out = append(out, tp.Partition)
	}
	return out
}

func (l listener) OnAssigned(_ context.Context, tps []gm.TopicPartition) {
	l.m.take(partitionsOf(tps))
}

// OnRevoked: commit, then give up (a vanishing member commits nothing).
func (l listener) OnRevoked(_ context.Context, tps []gm.TopicPartition) {
	ps := partitionsOf(tps)
	if !l.m.isVanishing() {
		l.m.commit(l.ctx, ps)
	}
	l.m.giveUp(ps)
}

func (l listener) OnLost(_ context.Context, tps []gm.TopicPartition) {
	l.m.giveUp(partitionsOf(tps))
}

// observe: the library's RPC attempts as the driver's statistics (latency and error names
// per RPC, routing counters), and the ownership checker's news of heartbeats.
func (m *member) observe(c gm.Call) {
	r := m.r
	second := int(c.Start.Sub(r.t0).Seconds())
	code := gm.ErrorCode(c.Err)
	if c.RPC == "FindCoordinator" {
		r.router.count("lookups")
		return
	}
	r.router.count("attempts")
	switch {
	case code == coordinatorLoadInProgress:
		r.router.count("load_in_progress")
		return
	case code == coordinatorNotAvailable || code == notCoordinator:
		r.router.count("reroutes")
		return
	case c.Err != nil && code == 0:
		st := status.Code(c.Err)
		if errors.Is(c.Err, context.DeadlineExceeded) {
			st = codes.DeadlineExceeded
		} else if errors.Is(c.Err, context.Canceled) {
			st = codes.Canceled
		}
		if st == codes.Canceled {
			return // abandoned by the member (it closed or vanished): not an answer, not an error
		}
		if st == codes.Unavailable || st == codes.DeadlineExceeded {
			r.router.count("unavailable")
			return
		}
		r.stats.record(c.RPC, second, c.Took)
		r.stats.error(c.RPC, "GRPC_"+st.String(), second)
		return
	}
	r.stats.record(c.RPC, second, c.Took)
	if code != 0 {
		r.stats.error(c.RPC, errorName(code), second)
	}
	if c.RPC == "ConsumerGroupHeartbeat" {
		switch code {
		case 0:
			r.owners.confirmed(m.group, m.name)
		case fencedMemberEpoch, unknownMemberID:
			r.owners.fenced(m.group, m.name)
		}
	}
}

// close leaves the group as a real client does on close: commit, revoke, leave.
func (m *member) close() {
	close(m.stop)
	<-m.done // (KIP-848: the auto-commits have stopped: none after the leave)
	if lib := m.library(); lib != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = lib.Close(ctx) // OnRevoked (commit, give up), then the leave heartbeat
		cancel()
	}
	m.cancel()
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
}

// vanish: the process dies -- no commit, no leave (its calls in flight are abandoned); its
// partitions are no longer consumed. The coordinator finds out when its session times out.
func (m *member) vanish() {
	m.mu.Lock()
	m.vanishing = true
	m.mu.Unlock()
	m.cancel()
	close(m.stop)
	<-m.done
	if lib := m.library(); lib != nil {
		_ = lib.CloseRemainInGroup(context.Background())
	}
	_, _, owned := m.snapshot()
	m.giveUp(owned)
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
}

func (m *member) library() *gm.Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lib
}

func (m *member) lastCommitTime() time.Time {
	m.commitMu.Lock()
	defer m.commitMu.Unlock()
	return m.lastCommit
}

func (m *member) setLastCommit() {
	m.commitMu.Lock()
	m.lastCommit = time.Now()
	m.commitMu.Unlock()
}

func (m *member) isVanishing() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.vanishing
}

func (m *member) stopping() bool {
	select {
	case <-m.stop:
		return true
	default:
		return false
	}
}

func (m *member) pause(d time.Duration) {
	select {
	case <-m.stop:
	case <-time.After(d):
	}
}

func (m *member) take(ps []int32) {
	now := m.r.elapsed()
	for _, p := range ps {
		m.r.owners.acquire(m.group, m.name, p, now)
	}
	m.mu.Lock()
	m.owned = append(m.owned, ps...)
	slices.Sort(m.owned)
	m.mu.Unlock()
}

func (m *member) giveUp(ps []int32) {
	for _, p := range ps {
		m.r.owners.release(m.group, m.name, p)
	}
	m.mu.Lock()
	m.owned = slices.DeleteFunc(m.owned, func(p int32) bool { return slices.Contains(ps, p) })
	m.mu.Unlock()
}

// commit commits the next value of each of ps (one commit of the member at a time): as
// the library's member (its id and epoch) for KIP-848, with the generation for classic.
func (m *member) commit(ctx context.Context, ps []int32) {
	if len(ps) == 0 {
		return
	}
	m.commitMu.Lock()
	defer m.commitMu.Unlock()
	m.lastCommit = time.Now()
	values := map[int32]int64{}
	for _, p := range ps {
		v := m.r.nextOffset(m.group, p)
		values[p] = v
		m.r.ledger.sent(m.group, p, v)
	}
	if m.classic {
		m.commitClassic(ctx, values)
		return
	}
	offsets := map[gm.TopicPartition]int64{}
	for p, v := range values {
		offsets[gm.TopicPartition{Topic: m.r.topic, Partition: p}] = v
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	failed, err := m.library().Commit(cctx, offsets)
	if err != nil {
		return // unknown outcome: the values stay "unknown" in the ledger
	}
	var refusedCode int32 // the first refusal's, as the RPC's error (as for classic)
	for _, p := range ps {
		v := values[p]
		if ferr, refused := failed[gm.TopicPartition{Topic: m.r.topic, Partition: p}]; refused {
			m.r.ledger.refused(m.group, p, v)
			refusedCode = cmp.Or(refusedCode, gm.ErrorCode(ferr))
		} else {
			m.r.ledger.acknowledged(m.group, p, v)
		}
	}
	if refusedCode != 0 {
		m.r.stats.error("OffsetCommit", errorName(refusedCode), int(time.Since(m.r.t0).Seconds()))
	}
}

// commitClassic: OffsetCommit with the classic member's generation (and instance id).
func (m *member) commitClassic(ctx context.Context, values map[int32]int64) {
	var partitions []*gcv1.OffsetCommitRequestPartition
	for p, v := range values {
		partitions = append(partitions, &gcv1.OffsetCommitRequestPartition{PartitionIndex: p, CommittedOffset: v})
	}
	slices.SortFunc(partitions, func(a, b *gcv1.OffsetCommitRequestPartition) int {
		return int(a.PartitionIndex - b.PartitionIndex)
	})
	m.mu.Lock()
	id, generation := m.id, m.generation
	m.mu.Unlock()
	req := &gcv1.OffsetCommitRequest{GroupId: m.group, MemberId: id,
		GenerationIdOrMemberEpoch: proto.Int32(generation),
		Topics:                    []*gcv1.OffsetCommitRequestTopic{{Name: m.r.topic, Partitions: partitions}}}
	if m.instanceID != "" {
		req.GroupInstanceId = proto.String(m.instanceID)
	}
	resp, ok := call(m.r, ctx, "OffsetCommit", m.group, 5*time.Second,
		func(c context.Context, client gcv1.GroupCoordinatorClient) (*gcv1.OffsetCommitResponse, error) {
			return client.OffsetCommit(c, req)
		},
		func(x *gcv1.OffsetCommitResponse) int32 {
			for _, t := range x.GetTopics() {
				for _, p := range t.GetPartitions() {
					if p.GetErrorCode() != 0 {
						return p.GetErrorCode()
					}
				}
			}
			return 0
		})
	if !ok {
		return // unknown outcome: the values stay "unknown" in the ledger
	}
	for _, t := range resp.GetTopics() {
		for _, p := range t.GetPartitions() {
			v, mine := values[p.GetPartitionIndex()]
			if !mine {
				continue
			}
			if p.GetErrorCode() == 0 {
				m.r.ledger.acknowledged(m.group, p.GetPartitionIndex(), v)
			} else {
				m.r.ledger.refused(m.group, p.GetPartitionIndex(), v)
			}
		}
	}
}
