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

// state of the heartbeat loop (owned by its goroutine; epoch and owned are mirrored in
// Member under mu for Epoch, Assignment and Commit).
type state struct {
	epoch  int32
	owned  []TopicPartition // sorted
	target []*gcv1.TopicPartitions
	// hasTarget: an assignment arrived since the join; acked: OnAssigned was called since
	// the join (an empty first assignment is still announced once)
	hasTarget, acked bool
}

func (m *Member) publish(st *state) {
	m.mu.Lock()
	m.epoch = st.epoch
	m.owned = slices.Clone(st.owned)
	m.mu.Unlock()
}

// heartbeatDone wakes the callers waiting for a heartbeat (Commit after STALE_MEMBER_EPOCH).
func (m *Member) heartbeatDone() {
	m.mu.Lock()
	close(m.hbDone)
	m.hbDone = make(chan struct{})
	m.mu.Unlock()
}

func (m *Member) request(st *state, epoch int32) *gcv1.ConsumerGroupHeartbeatRequest {
	req := &gcv1.ConsumerGroupHeartbeatRequest{
		GroupId: m.cfg.GroupID, MemberId: m.id, MemberEpoch: epoch, Context: m.reqContext(),
	}
	if m.cfg.InstanceID != "" {
		req.InstanceId = proto.String(m.cfg.InstanceID)
	}
	if epoch < 0 {
		return req
	}
	// the full subscription and what the member owns, every time (the coordinator treats an
	// unchanged value as unchanged)
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
	req.TopicPartitions = &gcv1.TopicPartitionsList{TopicPartitions: m.byID(st.owned)}
	req.ClientAssignors = m.clientAssignors()
	return req
}

// heartbeat sends req to the coordinator (re-routed and retried by call); a Kafka error in
// the answer comes back as an *Error with the response.
func (m *Member) heartbeat(ctx context.Context, req *gcv1.ConsumerGroupHeartbeatRequest) (*gcv1.ConsumerGroupHeartbeatResponse, error) {
	var resp *gcv1.ConsumerGroupHeartbeatResponse
	err := m.call(ctx, func(ctx context.Context, c *grpc.ClientConn) error {
		r, err := gcv1.NewGroupCoordinatorClient(c).ConsumerGroupHeartbeat(ctx, req)
		if err != nil {
			return err
		}
		resp = r
		if r.GetErrorCode() != CodeNone {
			return &Error{Op: "ConsumerGroupHeartbeat", Code: r.GetErrorCode(), Message: r.GetErrorMessage()}
		}
		return nil
	})
	return resp, err
}

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
	st := &state{}
	fails := newBackoff() // for errors the member retries by rejoining or waiting
	var interval time.Duration
	now := true
loop:
	for {
		if !now && !sleep(ctx, interval) {
			break
		}
		if ctx.Err() != nil {
			break
		}
		now = false
		resp, err := m.heartbeat(ctx, m.request(st, st.epoch))
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			switch ErrorCode(err) {
			case CodeFencedMemberEpoch, CodeUnknownMemberID:
				// fenced: what it owned is lost (another member may have it already); rejoin
				// at epoch 0 with the same member id
				if len(st.owned) > 0 {
					m.cfg.Listener.OnLost(cbctx, st.owned)
				}
				*st = state{}
				m.publish(st)
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
		st.epoch = resp.GetMemberEpoch()
		interval = time.Duration(resp.GetHeartbeatIntervalMs()) * time.Millisecond
		if interval <= 0 {
			interval = time.Second
		}
		if a := resp.GetAssignment(); a != nil {
			st.target, st.hasTarget = a.GetTopicPartitions(), true
		}
		m.publish(st)
		m.heartbeatDone()
		if resp.GetShouldComputeAssignment() {
			m.mu.Lock()
			start := !m.computing
			m.computing = true
			m.mu.Unlock()
			if start {
				go m.compute(ctx, st.epoch)
			}
		}
		if st.hasTarget {
			changed, err := m.reconcile(ctx, cbctx, st)
			if err != nil && ctx.Err() == nil {
				m.report(err)
			}
			now = changed // report the change at once
		}
	}
	m.err = m.leave(cbctx, st)
}

// reconcile moves the owned partitions toward the target: revocations first (OnRevoked,
// waited for, then reported by the next heartbeat, which the caller sends at once), and only
// when nothing is left to revoke the additions (OnAssigned). true: owned changed.
func (m *Member) reconcile(ctx, cbctx context.Context, st *state) (bool, error) {
	target, err := m.names(ctx, st.target)
	if err != nil {
		return false, err // retried after the next heartbeat
	}
	if revoked := minus(st.owned, target); len(revoked) > 0 {
		m.cfg.Listener.OnRevoked(cbctx, revoked)
		st.owned = minus(st.owned, revoked)
		m.publish(st)
		return true, nil
	}
	added := minus(target, st.owned)
	if len(added) == 0 && st.acked {
		return false, nil
	}
	m.cfg.Listener.OnAssigned(cbctx, added)
	st.owned, st.acked = target, true
	m.publish(st)
	return len(added) > 0, nil
}

// leave: OnRevoked(owned), then the leave heartbeat (epoch -1, or -2 for a static member).
func (m *Member) leave(cbctx context.Context, st *state) error {
	m.mu.Lock()
	ctx := m.leaveCtx
	m.mu.Unlock()
	if ctx == nil {
		ctx = context.Background()
	}
	if len(st.owned) > 0 {
		m.cfg.Listener.OnRevoked(cbctx, st.owned)
		st.owned = nil
	}
	joined := st.epoch > 0
	st.epoch = 0
	m.publish(st)
	if !joined {
		return nil // not in the group (never joined, or fenced): nothing to leave
	}
	epoch := int32(-1)
	if m.cfg.InstanceID != "" {
		epoch = -2
	}
	_, err := m.heartbeat(ctx, m.request(st, epoch))
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
		err := m.call(ctx, func(ctx context.Context, c *grpc.ClientConn) error {
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
