package member

import (
	"context"
	"errors"

	gcv1 "github.com/groupcoord/groupcoord/gen/go/groupcoord/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Commit commits offsets as the member (its member id and current epoch). The error is for
// the call as a whole; the map holds the partitions the coordinator refused, each with its
// *Error (empty when all were committed). On STALE_MEMBER_EPOCH it waits for the next
// heartbeat's epoch and retries once. ctx bounds the call, re-routing included.
func (m *Member) Commit(ctx context.Context, offsets map[TopicPartition]int64) (map[TopicPartition]error, error) {
	failed, stale, err := m.commitOnce(ctx, offsets)
	if err == nil && stale {
		if err = m.waitHeartbeat(ctx); err == nil {
			failed, _, err = m.commitOnce(ctx, offsets)
		}
	}
	return failed, err
}

func (m *Member) commitOnce(ctx context.Context, offsets map[TopicPartition]int64) (map[TopicPartition]error, bool, error) {
	byTopic := map[string]*gcv1.OffsetCommitRequestTopic{}
	var topics []*gcv1.OffsetCommitRequestTopic
	tps := make([]TopicPartition, 0, len(offsets))
	for tp := range offsets {
		tps = append(tps, tp)
	}
	sortTPs(tps) // the request in topic and partition order, not the map's
	for _, tp := range tps {
		off := offsets[tp]
		t := byTopic[tp.Topic]
		if t == nil {
			t = &gcv1.OffsetCommitRequestTopic{Name: tp.Topic}
			byTopic[tp.Topic] = t
			topics = append(topics, t)
		}
		t.Partitions = append(t.Partitions, &gcv1.OffsetCommitRequestPartition{
			PartitionIndex: tp.Partition, CommittedOffset: off})
	}
	var failed map[TopicPartition]error
	stale := false
	err := m.call(ctx, "OffsetCommit", func(ctx context.Context, c *grpc.ClientConn) error {
		req := &gcv1.OffsetCommitRequest{
			GroupId: m.cfg.GroupID, MemberId: m.id, Topics: topics,
			GenerationIdOrMemberEpoch: proto.Int32(m.Epoch()),
		}
		if m.cfg.InstanceID != "" {
			req.GroupInstanceId = proto.String(m.cfg.InstanceID)
		}
		resp, err := gcv1.NewGroupCoordinatorClient(c).OffsetCommit(ctx, req)
		if err != nil {
			return err
		}
		failed, stale = map[TopicPartition]error{}, false
		for _, t := range resp.GetTopics() {
			for _, p := range t.GetPartitions() {
				code := p.GetErrorCode()
				if code == CodeNone {
					continue
				}
				if routing(code) { // the group moved: the whole commit is retried there
					return &Error{Op: "OffsetCommit", Code: code, Message: p.GetErrorMessage()}
				}
				stale = stale || code == CodeStaleMemberEpoch
				failed[TopicPartition{t.GetName(), p.GetPartitionIndex()}] =
					&Error{Op: "OffsetCommit", Code: code, Message: p.GetErrorMessage()}
			}
		}
		return nil
	})
	return failed, stale, err
}

// waitHeartbeat returns after the next successful heartbeat (ErrClosed once the member is
// leaving: then none comes).
func (m *Member) waitHeartbeat(ctx context.Context) error {
	m.mu.Lock()
	ch := m.hbDone
	m.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-m.stop: // leaving: no heartbeat comes any more
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Fetch returns the group's committed offsets of partitions (nil: all of the group's), as the
// member (its id and epoch; STALE_MEMBER_EPOCH: retried once after the next heartbeat). A
// partition without a committed offset has -1.
func (m *Member) Fetch(ctx context.Context, partitions []TopicPartition) (map[TopicPartition]int64, error) {
	out, err := m.fetchOnce(ctx, partitions)
	if ErrorCode(err) == CodeStaleMemberEpoch {
		if err = m.waitHeartbeat(ctx); err == nil {
			out, err = m.fetchOnce(ctx, partitions)
		}
	}
	return out, err
}

func (m *Member) fetchOnce(ctx context.Context, partitions []TopicPartition) (map[TopicPartition]int64, error) {
	var list *gcv1.OffsetFetchRequestTopicsList
	if partitions != nil {
		list = &gcv1.OffsetFetchRequestTopicsList{}
		byTopic := map[string]*gcv1.OffsetFetchRequestTopics{}
		for _, tp := range partitions {
			t := byTopic[tp.Topic]
			if t == nil {
				t = &gcv1.OffsetFetchRequestTopics{Name: tp.Topic}
				byTopic[tp.Topic] = t
				list.Topics = append(list.Topics, t)
			}
			t.PartitionIndexes = append(t.PartitionIndexes, tp.Partition)
		}
	}
	var out map[TopicPartition]int64
	err := m.call(ctx, "OffsetFetch", func(ctx context.Context, c *grpc.ClientConn) error {
		g := &gcv1.OffsetFetchRequestGroup{GroupId: m.cfg.GroupID, Topics: list,
			MemberId: proto.String(m.id), MemberEpoch: proto.Int32(m.Epoch())}
		resp, err := gcv1.NewGroupCoordinatorClient(c).OffsetFetch(ctx, &gcv1.OffsetFetchRequest{
			Groups: []*gcv1.OffsetFetchRequestGroup{g}, RequireStable: true, Context: m.reqContext()})
		if err != nil {
			return err
		}
		out = map[TopicPartition]int64{}
		for _, rg := range resp.GetGroups() {
			if rg.GetErrorCode() != CodeNone {
				return &Error{Op: "OffsetFetch", Code: rg.GetErrorCode(), Message: rg.GetErrorMessage()}
			}
			for _, t := range rg.GetTopics() {
				for _, p := range t.GetPartitions() {
					if p.GetErrorCode() != CodeNone {
						return &Error{Op: "OffsetFetch", Code: p.GetErrorCode(),
							Message: t.GetName()}
					}
					out[TopicPartition{t.GetName(), p.GetPartitionIndex()}] = p.GetCommittedOffset()
				}
			}
		}
		return nil
	})
	return out, err
}

// GroupDescription is ConsumerGroupDescribe's answer for the member's group.
type GroupDescription struct {
	GroupID         string              `json:"group_id"`
	State           string              `json:"state"`
	GroupEpoch      int32               `json:"group_epoch"`
	AssignmentEpoch int32               `json:"assignment_epoch"`
	AssignorName    string              `json:"assignor_name"`
	Members         []MemberDescription `json:"members"`
}

// MemberDescription is one member of a GroupDescription.
type MemberDescription struct {
	MemberID             string           `json:"member_id"`
	InstanceID           string           `json:"instance_id,omitempty"`
	RackID               string           `json:"rack_id,omitempty"`
	ClientID             string           `json:"client_id"`
	ClientHost           string           `json:"client_host"`
	MemberEpoch          int32            `json:"member_epoch"`
	SubscribedTopics     []string         `json:"subscribed_topics,omitempty"`
	SubscribedTopicRegex string           `json:"subscribed_topic_regex,omitempty"`
	Assignment           []TopicPartition `json:"assignment"`
	TargetAssignment     []TopicPartition `json:"target_assignment"`
}

// Describe describes the member's group (ConsumerGroupDescribe on its coordinator).
func (m *Member) Describe(ctx context.Context) (*GroupDescription, error) {
	var out *GroupDescription
	err := m.call(ctx, "ConsumerGroupDescribe", func(ctx context.Context, c *grpc.ClientConn) error {
		resp, err := gcv1.NewGroupCoordinatorClient(c).ConsumerGroupDescribe(ctx,
			&gcv1.ConsumerGroupDescribeRequest{GroupIds: []string{m.cfg.GroupID}, Context: m.reqContext()})
		if err != nil {
			return err
		}
		for _, g := range resp.GetGroups() {
			if g.GetGroupId() != m.cfg.GroupID {
				continue
			}
			if g.GetErrorCode() != CodeNone {
				return &Error{Op: "ConsumerGroupDescribe", Code: g.GetErrorCode(), Message: g.GetErrorMessage()}
			}
			out = &GroupDescription{GroupID: g.GetGroupId(), State: g.GetGroupState(),
				GroupEpoch: g.GetGroupEpoch(), AssignmentEpoch: g.GetAssignmentEpoch(),
				AssignorName: g.GetAssignorName()}
			for _, mem := range g.GetMembers() {
				out.Members = append(out.Members, MemberDescription{
					MemberID: mem.GetMemberId(), InstanceID: mem.GetInstanceId(),
					RackID: mem.GetRackId(), ClientID: mem.GetClientId(),
					ClientHost: mem.GetClientHost(), MemberEpoch: mem.GetMemberEpoch(),
					SubscribedTopics:     mem.GetSubscribedTopicNames(),
					SubscribedTopicRegex: mem.GetSubscribedTopicRegex(),
					Assignment:           described(mem.GetAssignment()),
					TargetAssignment:     described(mem.GetTargetAssignment()),
				})
			}
			return nil
		}
		return errors.New("member: ConsumerGroupDescribe: the group is not in the answer")
	})
	return out, err
}

func described(ts []*gcv1.DescribedTopicPartitions) []TopicPartition {
	var out []TopicPartition
	for _, t := range ts {
		for _, p := range t.GetPartitions() {
			out = append(out, TopicPartition{t.GetTopicName(), p})
		}
	}
	sortTPs(out)
	return out
}
