package member

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	gcv1 "github.com/groupcoord/groupcoord/gen/go/groupcoord/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// sent: what the heartbeat loop last reported (KIP-848: a heartbeat carries only what
// changed). valid is false after the join and after any failed heartbeat (an error answer,
// a re-route, a transport error): the next one sends the full state again, as Kafka's
// consumer does.
type sent struct {
	valid     bool
	owned     []TopicPartition
	assignors *gcv1.ClientAssignorList
}

// heartbeatDone wakes the callers waiting for a heartbeat (Commit after STALE_MEMBER_EPOCH).
func (m *Member) heartbeatDone() {
	m.mu.Lock()
	close(m.hbDone)
	m.hbDone = make(chan struct{})
	m.mu.Unlock()
}

// kick makes a pending signal on a 1-buffered channel (dropped when one is pending).
func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// request builds a heartbeat at epoch reporting owned. full: the join, or the state is to be
// sent again (after an error); otherwise the subscription, rack, assignors and rebalance
// timeout are left out (unchanged) and owned is sent only when it differs from the last
// report. A leave (epoch < 0) carries only the member's identity.
func (m *Member) request(last *sent, epoch int32, owned []TopicPartition, full bool) *gcv1.ConsumerGroupHeartbeatRequest {
	req := &gcv1.ConsumerGroupHeartbeatRequest{
		GroupId: m.cfg.GroupID, MemberId: m.id, MemberEpoch: epoch, Context: m.reqContext(),
	}
	if m.cfg.InstanceID != "" {
		req.InstanceId = proto.String(m.cfg.InstanceID)
	}
	if epoch < 0 {
		return req
	}
	full = full || epoch == 0 || !last.valid
	if full {
		req.RebalanceTimeoutMs = proto.Int32(int32(m.cfg.RebalanceTimeout / time.Millisecond))
		if m.cfg.RackID != "" {
			req.RackId = proto.String(m.cfg.RackID)
		}
		if m.cfg.ServerAssignor != "" {
			req.ServerAssignor = proto.String(m.cfg.ServerAssignor)
		}
		if m.cfg.TopicRegex != "" {
			req.SubscribedTopicRegex = proto.String(m.cfg.TopicRegex)
		} else {
			req.SubscribedTopicNames = &gcv1.StringList{Values: m.cfg.Topics}
		}
	}
	if assignors := m.clientAssignors(); assignors != nil && (full || !proto.Equal(assignors, last.assignors)) {
		req.ClientAssignors = assignors // (an assignor's metadata may change)
	}
	if full || !slices.Equal(owned, last.owned) {
		req.TopicPartitions = &gcv1.TopicPartitionsList{TopicPartitions: m.byID(owned)}
	}
	return req
}

// heartbeat sends a heartbeat at epoch reporting owned to the coordinator (re-routed and
// retried by call; a retry after a failed attempt sends the full state); a Kafka error in
// the answer comes back as an *Error with the response. last is updated: what was sent on
// success, invalid on failure.
func (m *Member) heartbeat(ctx context.Context, last *sent, epoch int32, owned []TopicPartition) (*gcv1.ConsumerGroupHeartbeatResponse, error) {
	var resp *gcv1.ConsumerGroupHeartbeatResponse
	var req *gcv1.ConsumerGroupHeartbeatRequest
	attempts := 0
	err := m.call(ctx, "ConsumerGroupHeartbeat", func(ctx context.Context, c *grpc.ClientConn) error {
		req = m.request(last, epoch, owned, attempts > 0)
		attempts++
		r, err := gcv1.NewGroupCoordinatorClient(c).ConsumerGroupHeartbeat(ctx, req)
		code := r.GetErrorCode()
		if err != nil {
			return err
		}
		resp = r
		if code != CodeNone {
			return &Error{Op: "ConsumerGroupHeartbeat", Code: code, Message: r.GetErrorMessage()}
		}
		return nil
	})
	if err != nil {
		*last = sent{}
		return resp, err
	}
	last.valid = true
	if req.TopicPartitions != nil {
		last.owned = slices.Clone(owned)
	}
	if req.ClientAssignors != nil {
		last.assignors = req.ClientAssignors
	}
	return resp, nil
}

// loop is the heartbeat goroutine: it heartbeats at the coordinator's interval (at once when
// the reconciler asks), records each assignment as the target and wakes the reconciler, which
// runs the callbacks beside it (reconciler). Fenced, it lets the running callback finish,
// has the reconciler call OnLost and rejoins at epoch 0. When Close stops it, it waits for
// the reconciler, then leaves.
func (m *Member) loop(cbctx context.Context) {
	defer close(m.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-m.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	recDone := make(chan struct{})
	go func() {
		defer close(recDone)
		m.reconciler(ctx, cbctx)
	}()
	var last sent
	fails := newBackoff() // for errors the member retries by rejoining or waiting
	interval := time.Second
	now := true
loop:
	for {
		if !now {
			t := time.NewTimer(interval)
			select {
			case <-t.C:
			case <-m.beatNow:
			case <-ctx.Done():
			}
			t.Stop()
		}
		if ctx.Err() != nil {
			break
		}
		now = false
		m.mu.Lock()
		epoch, owned := m.epoch, m.owned
		m.mu.Unlock()
		resp, err := m.heartbeat(ctx, &last, epoch, owned)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			switch ErrorCode(err) {
			case CodeFencedMemberEpoch, CodeUnknownMemberID:
				// fenced: the running callback finishes, then OnLost(owned) (another member
				// may have them already); then a rejoin at epoch 0 with the same member id
				m.mu.Lock()
				m.fenced, m.epoch = true, 0
				m.lostDone = make(chan struct{})
				lost := m.lostDone
				m.mu.Unlock()
				kick(m.reconcile)
				select {
				case <-lost:
				case <-ctx.Done():
					break loop
				}
				now = true
				if !sleep(ctx, fails.next()) {
					break loop
				}
				continue
			default:
				// a static member's instance id in use (UNRELEASED_INSTANCE_ID,
				// FENCED_INSTANCE_ID), an unknown assignor, a gRPC error other than
				// UNAVAILABLE / DEADLINE_EXCEEDED (those, and routing codes, call retries
				// itself): told, and retried with backoff
				m.report(err)
				if !sleep(ctx, fails.next()) {
					break loop
				}
				now = true
				continue
			}
		}
		fails.reset()
		if ms := resp.GetHeartbeatIntervalMs(); ms > 0 {
			interval = time.Duration(ms) * time.Millisecond
		}
		m.mu.Lock()
		m.epoch = resp.GetMemberEpoch()
		if a := resp.GetAssignment(); a != nil {
			m.target, m.hasTarget = a.GetTopicPartitions(), true
		}
		start := resp.GetShouldComputeAssignment() && !m.computing
		m.computing = m.computing || start
		m.mu.Unlock()
		m.heartbeatDone()
		if start {
			go m.compute(ctx, resp.GetMemberEpoch())
		}
		kick(m.reconcile)
	}
	<-recDone // a callback in progress returns first
	m.err = m.leave(cbctx)
}

// reconciler runs the callbacks (on its own goroutine, so that heartbeats go on while they
// block) each time the loop wakes it, until ctx ends.
func (m *Member) reconciler(ctx, cbctx context.Context) {
	for {
		select {
		case <-m.reconcile:
		case <-ctx.Done():
			return
		}
		for ctx.Err() == nil && m.reconcileStep(ctx, cbctx) {
		}
	}
}

// reconcileStep does one step toward the target: OnLost after a fencing; else revocations
// first (OnRevoked, waited for; what the member owns shrinks and a heartbeat reports it at
// once, while until then the heartbeats report the old set); and only when nothing is left
// to revoke the additions (OnAssigned, then reported likewise). true: a step was taken (or
// a fencing came meanwhile): call again.
func (m *Member) reconcileStep(ctx, cbctx context.Context) bool {
	m.mu.Lock()
	if m.fenced {
		lost, done := m.owned, m.lostDone
		m.owned, m.target, m.hasTarget, m.acked, m.fenced = nil, nil, false, false, false
		m.mu.Unlock()
		if len(lost) > 0 {
			m.cfg.Listener.OnLost(cbctx, lost)
		}
		close(done)
		return false
	}
	if !m.hasTarget {
		m.mu.Unlock()
		return false
	}
	ids := m.target
	m.mu.Unlock()
	target, err := m.names(ctx, ids)
	if err != nil {
		if ctx.Err() == nil {
			m.report(err) // retried after the next heartbeat
		}
		return false
	}
	m.mu.Lock()
	if m.fenced {
		m.mu.Unlock()
		return true
	}
	if revoked := minus(m.owned, target); len(revoked) > 0 {
		m.mu.Unlock()
		m.cfg.Listener.OnRevoked(cbctx, revoked)
		m.mu.Lock()
		m.owned = minus(m.owned, revoked) // released, also if fenced meanwhile
		m.mu.Unlock()
		kick(m.beatNow)
		return true
	}
	added := minus(target, m.owned)
	if len(added) == 0 && m.acked {
		m.mu.Unlock()
		return false
	}
	m.mu.Unlock()
	if ctx.Err() != nil {
		return false
	}
	m.cfg.Listener.OnAssigned(cbctx, added)
	m.mu.Lock()
	m.owned = union(m.owned, added)
	m.acked = true
	m.mu.Unlock()
	if len(added) > 0 {
		kick(m.beatNow)
	}
	return true
}

// leave (the reconciler has stopped): nothing after CloseRemainInGroup; else OnLost(owned) if a fencing was pending, else
// OnRevoked(owned); then the leave heartbeat (epoch -1, or -2 for a static member).
func (m *Member) leave(cbctx context.Context) error {
	m.mu.Lock()
	ctx := m.leaveCtx
	if m.remain { // CloseRemainInGroup: the coordinator finds out when the session expires
		m.epoch = 0
		m.mu.Unlock()
		return nil
	}
	owned, fenced, epoch := m.owned, m.fenced, m.epoch
	done := m.lostDone
	m.mu.Unlock()
	if ctx == nil {
		ctx = context.Background()
	}
	if len(owned) > 0 {
		if fenced {
			m.cfg.Listener.OnLost(cbctx, owned)
		} else {
			m.cfg.Listener.OnRevoked(cbctx, owned)
		}
	}
	m.mu.Lock() // (OnRevoked may commit: as the member, at its epoch)
	m.owned, m.epoch, m.fenced = nil, 0, false
	m.mu.Unlock()
	if fenced {
		close(done)
	}
	if fenced || epoch <= 0 {
		return nil // not in the group (never joined, or fenced): nothing to leave
	}
	leave := int32(-1)
	if m.cfg.InstanceID != "" {
		leave = -2
	}
	_, err := m.heartbeat(ctx, &sent{}, leave, nil)
	if c := ErrorCode(err); c == CodeUnknownMemberID || c == CodeFencedMemberEpoch {
		return nil // already gone
	}
	return err
}

// names maps a target by topic id to partitions by name (TopicCatalog.DescribeTopics for
// the ids not cached; a topic still unknown is an error: retried after the next heartbeat).
func (m *Member) names(ctx context.Context, target []*gcv1.TopicPartitions) ([]TopicPartition, error) {
	var missing []string
	m.mu.Lock()
	for _, t := range target {
		if _, ok := m.topicNames[t.GetTopicId()]; !ok {
			missing = append(missing, t.GetTopicId())
		}
	}
	m.mu.Unlock()
	if len(missing) > 0 {
		err := m.call(ctx, "DescribeTopics", func(ctx context.Context, c *grpc.ClientConn) error {
			resp, err := gcv1.NewTopicCatalogClient(c).DescribeTopics(ctx, &gcv1.DescribeTopicsRequest{TopicIds: missing})
			if err != nil {
				return err
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, t := range resp.GetTopics() {
				if t.GetErrorCode() == CodeNone && t.GetName() != "" {
					m.topicNames[t.GetTopicId()] = t.GetName()
					m.topicIDs[t.GetName()] = t.GetTopicId()
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []TopicPartition
	for _, t := range target {
		name, ok := m.topicNames[t.GetTopicId()]
		if !ok {
			return nil, errors.New("member: topic id " + t.GetTopicId() + " of the assignment is not in the topic catalog")
		}
		for _, p := range t.GetPartitions() {
			out = append(out, TopicPartition{Topic: name, Partition: p})
		}
	}
	sortTPs(out)
	return slices.Compact(out), nil
}

// byID: partitions by name -> by topic id (names resolved by names, so cached).
func (m *Member) byID(tps []TopicPartition) []*gcv1.TopicPartitions {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*gcv1.TopicPartitions
	for _, tp := range tps {
		id := m.topicIDs[tp.Topic]
		if n := len(out); n > 0 && out[n-1].TopicId == id {
			out[n-1].Partitions = append(out[n-1].Partitions, tp.Partition)
			continue
		}
		out = append(out, &gcv1.TopicPartitions{TopicId: id, Partitions: []int32{tp.Partition}})
	}
	return out
}

func sortTPs(tps []TopicPartition) {
	slices.SortFunc(tps, func(a, b TopicPartition) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
}

// union: the partitions of a and b (sorted).
func union(a, b []TopicPartition) []TopicPartition {
	out := append(slices.Clone(a), b...)
	sortTPs(out)
	return slices.Compact(out)
}

// minus: the partitions of a not in b (both sorted; the result sorted).
func minus(a, b []TopicPartition) []TopicPartition {
	in := make(map[TopicPartition]bool, len(b))
	for _, tp := range b {
		in[tp] = true
	}
	var out []TopicPartition
	for _, tp := range a {
		if !in[tp] {
			out = append(out, tp)
		}
	}
	return out
}
