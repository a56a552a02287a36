package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	gcv1 "github.com/groupcoord/groupcoord/gen/go/groupcoord/v1"
	"google.golang.org/protobuf/proto"
)

// member is one simulated consumer in a goroutine: KIP-848 (ConsumerGroupHeartbeat), or
// classic (JoinGroup/SyncGroup/Heartbeat, classic.go) in a classic group.
type member struct {
	r          *run
	classic    bool
	group      string
	index      int
	name       string
	instanceID string
	mu         sync.Mutex // guards id, epoch, owned, started, closed (read by the group's watcher)
	id         string
	epoch      int32   // KIP-848: member epoch; classic: the generation synced at
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
	go func() {
		defer close(m.done)
		if m.classic {
			m.classicLoop(mctx)
		} else {
			m.loop(mctx)
		}
	}()
}

// close leaves the group as a real client does on close: commit, revoke, leave.
func (m *member) close() {
	close(m.stop)
	<-m.done
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
	_, _, owned := m.snapshot()
	m.giveUp(owned)
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
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

func (m *member) request(epoch int32) *gcv1.ConsumerGroupHeartbeatRequest {
	id, _, owned := m.snapshot()
	req := &gcv1.ConsumerGroupHeartbeatRequest{GroupId: m.group, MemberId: id, MemberEpoch: epoch,
		TopicPartitions: &gcv1.TopicPartitionsList{}}
	if len(owned) > 0 {
		req.TopicPartitions.TopicPartitions = []*gcv1.TopicPartitions{{TopicId: m.r.topicID, Partitions: owned}}
	}
	if m.instanceID != "" {
		req.InstanceId = proto.String(m.instanceID)
	}
	if epoch == 0 {
		req.RebalanceTimeoutMs = proto.Int32(m.r.s.RebalanceTimeoutMs)
		req.SubscribedTopicNames = &gcv1.StringList{Values: []string{m.r.topic}}
	}
	return req
}

func (m *member) heartbeat(ctx context.Context, epoch int32) (*gcv1.ConsumerGroupHeartbeatResponse, bool) {
	req := m.request(epoch)
	return call(m.r, ctx, "ConsumerGroupHeartbeat", m.group, 5*time.Second,
		func(c context.Context, client gcv1.GroupCoordinatorClient) (*gcv1.ConsumerGroupHeartbeatResponse, error) {
			return client.ConsumerGroupHeartbeat(c, req)
		},
		func(x *gcv1.ConsumerGroupHeartbeatResponse) int32 { return x.GetErrorCode() })
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

func (m *member) commit(ctx context.Context, ps []int32) {
	if len(ps) == 0 {
		return
	}
	m.lastCommit = time.Now()
	_, epoch, _ := m.snapshot()
	if m.classic {
		m.mu.Lock()
		epoch = m.generation
		m.mu.Unlock()
	}
	values := map[int32]int64{}
	var partitions []*gcv1.OffsetCommitRequestPartition
	for _, p := range ps {
		v := m.r.nextOffset(m.group, p)
		values[p] = v
		m.r.ledger.sent(m.group, p, v)
		partitions = append(partitions, &gcv1.OffsetCommitRequestPartition{PartitionIndex: p, CommittedOffset: v})
	}
	id, _, _ := m.snapshot()
	req := &gcv1.OffsetCommitRequest{GroupId: m.group, MemberId: id,
		GenerationIdOrMemberEpoch: proto.Int32(epoch),
		Topics:                    []*gcv1.OffsetCommitRequestTopic{{Name: m.r.topic, Partitions: partitions}}}
	if m.classic && m.instanceID != "" {
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

func (m *member) loop(ctx context.Context) {
	interval := time.Second
	commitEvery := time.Duration(m.r.s.CommitIntervalS * float64(time.Second))
	for !m.stopping() {
		_, epoch, _ := m.snapshot()
		resp, ok := m.heartbeat(ctx, epoch)
		again := interval
		switch {
		case !ok:
			if m.isVanishing() {
				return
			}
			again = min(interval, time.Second)
		case resp.GetErrorCode() == 0:
			m.r.owners.confirmed(m.group, m.name)
			m.mu.Lock()
			m.epoch = resp.GetMemberEpoch()
			m.mu.Unlock()
			if ms := resp.GetHeartbeatIntervalMs(); ms > 0 {
				interval = time.Duration(ms) * time.Millisecond
				again = interval
			}
			if a := resp.GetAssignment(); a != nil {
				var target []int32
				for _, tp := range a.GetTopicPartitions() {
					target = append(target, tp.GetPartitions()...)
				}
				slices.Sort(target)
				_, _, owned := m.snapshot()
				var revoke, assign []int32
				for _, p := range owned {
					if !slices.Contains(target, p) {
						revoke = append(revoke, p)
					}
				}
				for _, p := range target {
					if !slices.Contains(owned, p) {
						assign = append(assign, p)
					}
				}
				if len(revoke) > 0 {
					m.commit(ctx, revoke) // commit on revoke, then give up
					m.giveUp(revoke)
				}
				m.take(assign)
				if len(revoke)+len(assign) > 0 {
					again = 0 // acknowledge at once
				}
			}
		case resp.GetErrorCode() == fencedMemberEpoch || resp.GetErrorCode() == unknownMemberID:
			m.r.owners.fenced(m.group, m.name)
			_, _, owned := m.snapshot()
			m.giveUp(owned)
			m.mu.Lock()
			m.epoch = 0
			m.mu.Unlock()
			again = 0
		default:
			again = min(interval, time.Second)
		}
		_, epoch, owned := m.snapshot()
		if commitEvery > 0 && time.Since(m.lastCommit) >= commitEvery && len(owned) > 0 && epoch > 0 {
			m.commit(ctx, owned)
		}
		if again > 0 {
			m.pause(again)
		}
	}
	if m.isVanishing() {
		return // no commit, no leave
	}
	// close: commit, revoke, leave
	_, epoch, owned := m.snapshot()
	if epoch > 0 && len(owned) > 0 {
		m.commit(ctx, owned)
	}
	m.giveUp(owned)
	leave := int32(-1)
	if m.instanceID != "" {
		leave = -2
	}
	m.heartbeat(ctx, leave)
}
