package member

import (
	"context"
	"fmt"
	"sort"

	gcv1 "github.com/groupcoord/groupcoord/gen/go/groupcoord/v1"
	"google.golang.org/grpc"
)

// Assignor is a client-side assignor (docs/client-side-assignors.md): the member declares it
// in its heartbeats, and when the coordinator chooses this member to compute the group's
// target (should_compute_assignment) the member fetches the group's state
// (ConsumerGroupPrepareAssignment), calls Assign on its own goroutine (heartbeats go on) and
// installs the result (ConsumerGroupInstallAssignment).
type Assignor interface {
	// Name of the assignor, the same on every member that declares it.
	Name() string
	// Versions: the range of assignor versions this member supports.
	Versions() (minimum, maximum int32)
	// Metadata this member declares for it (its version within the range, and bytes).
	Metadata() (version int32, data []byte)
	// Assign computes every member's target. A member left out gets nothing. An error
	// installs error = 1: the coordinator chooses another member at once.
	Assign(ctx context.Context, spec GroupSpec) (map[string]MemberAssignment, error)
}

// GroupSpec is the group's state as ConsumerGroupPrepareAssignment returns it.
type GroupSpec struct {
	GroupID         string
	GroupEpoch      int32 // the epoch the target is computed for
	AssignorName    string
	AssignorVersion int32
	Members         map[string]SpecMember // by member id
	Topics          map[string]SpecTopic  // the subscribed topics, by topic id
}

// SpecMember is one member in a GroupSpec.
type SpecMember struct {
	MemberID, InstanceID, RackID string
	SubscribedTopicIDs           []string
	MetadataVersion              int32 // its declaration of the group's assignor
	MetadataBytes                []byte
	Target                       map[string][]int32 // its current target by topic id (stickiness)
	Type                         string             // "consumer" or "classic"
}

// SpecTopic is one subscribed topic in a GroupSpec.
type SpecTopic struct {
	ID, Name      string
	NumPartitions int32
}

// MemberAssignment is one member's target from Assign: partitions by topic id, the
// metadata the assignor gives it and KIP-848's per-member error (0 = none).
type MemberAssignment struct {
	Partitions      map[string][]int32
	MetadataVersion int32
	MetadataBytes   []byte
	Error           int32
}

func (m *Member) clientAssignors() *gcv1.ClientAssignorList {
	if len(m.cfg.Assignors) == 0 {
		return nil
	}
	list := &gcv1.ClientAssignorList{}
	for _, a := range m.cfg.Assignors {
		lo, hi := a.Versions()
		v, data := a.Metadata()
		list.Assignors = append(list.Assignors, &gcv1.ClientAssignor{Name: a.Name(),
			MinimumVersion: lo, MaximumVersion: hi, MetadataVersion: v, MetadataBytes: data})
	}
	return list
}

// compute runs one computation the coordinator asked of this member at epoch (on its own
// goroutine; m.computing is cleared at the end). UNKNOWN_MEMBER_ID / STALE_MEMBER_EPOCH from
// either RPC drop it: a later heartbeat asks again if it is still needed.
func (m *Member) compute(ctx context.Context, epoch int32) {
	defer func() {
		m.mu.Lock()
		m.computing = false
		m.mu.Unlock()
	}()
	var prep *gcv1.ConsumerGroupPrepareAssignmentResponse
	err := m.call(ctx, "ConsumerGroupPrepareAssignment", func(ctx context.Context, c *grpc.ClientConn) error {
		r, err := gcv1.NewGroupCoordinatorClient(c).ConsumerGroupPrepareAssignment(ctx,
			&gcv1.ConsumerGroupPrepareAssignmentRequest{GroupId: m.cfg.GroupID, MemberId: m.id,
				MemberEpoch: epoch, Context: m.reqContext()})
		if err != nil {
			return err
		}
		prep = r
		if r.GetErrorCode() != CodeNone {
			return &Error{Op: "ConsumerGroupPrepareAssignment", Code: r.GetErrorCode(), Message: r.GetErrorMessage()}
		}
		return nil
	})
	if err != nil {
		if c := ErrorCode(err); c != CodeUnknownMemberID && c != CodeStaleMemberEpoch && ctx.Err() == nil {
			m.report(err)
		}
		return
	}
	spec := specOf(m.cfg.GroupID, prep)
	install := &gcv1.ConsumerGroupInstallAssignmentRequest{GroupId: m.cfg.GroupID,
		MemberId: m.id, MemberEpoch: epoch, GroupEpoch: prep.GetGroupEpoch(), Context: m.reqContext()}
	plan, aerr := m.assign(ctx, spec)
	if aerr != nil {
		m.report(aerr)
		install.Error = 1
	} else {
		ids := make([]string, 0, len(plan))
		for id := range plan {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			a := plan[id]
			im := &gcv1.InstalledMember{MemberId: id, MetadataVersion: a.MetadataVersion,
				MetadataBytes: a.MetadataBytes, Error: a.Error}
			topics := make([]string, 0, len(a.Partitions))
			for t := range a.Partitions {
				topics = append(topics, t)
			}
			sort.Strings(topics)
			for _, t := range topics {
				im.Partitions = append(im.Partitions, &gcv1.TopicPartitions{TopicId: t, Partitions: a.Partitions[t]})
			}
			install.Members = append(install.Members, im)
		}
	}
	err = m.installAssignment(ctx, install)
	if ErrorCode(err) == codeInvalidAssignment && install.Error == 0 {
		// the assignor's result was refused: say so, and let another member compute
		m.report(err)
		install.Members, install.Error = nil, 1
		err = m.installAssignment(ctx, install)
	}
	if c := ErrorCode(err); err != nil && c != CodeUnknownMemberID && c != CodeStaleMemberEpoch && ctx.Err() == nil {
		m.report(err)
	}
}

// codeInvalidAssignment: groupcoord's INVALID_ASSIGNMENT (KIP-848 names it, Kafka has no number).
const codeInvalidAssignment int32 = 10001

func (m *Member) installAssignment(ctx context.Context, req *gcv1.ConsumerGroupInstallAssignmentRequest) error {
	return m.call(ctx, "ConsumerGroupInstallAssignment", func(ctx context.Context, c *grpc.ClientConn) error {
		r, err := gcv1.NewGroupCoordinatorClient(c).ConsumerGroupInstallAssignment(ctx, req)
		if err != nil {
			return err
		}
		if r.GetErrorCode() != CodeNone {
			return &Error{Op: "ConsumerGroupInstallAssignment", Code: r.GetErrorCode(), Message: r.GetErrorMessage()}
		}
		return nil
	})
}

// assign calls the assignor of the group's name; a panic or a missing assignor is an error.
func (m *Member) assign(ctx context.Context, spec GroupSpec) (plan map[string]MemberAssignment, err error) {
	for _, a := range m.cfg.Assignors {
		if a.Name() != spec.AssignorName {
			continue
		}
		defer func() {
			if r := recover(); r != nil {
				plan, err = nil, fmt.Errorf("member: assignor %s panicked: %v", a.Name(), r)
			}
		}()
		return a.Assign(ctx, spec)
	}
	return nil, fmt.Errorf("member: no client-side assignor named %q", spec.AssignorName)
}

func specOf(group string, r *gcv1.ConsumerGroupPrepareAssignmentResponse) GroupSpec {
	spec := GroupSpec{GroupID: group, GroupEpoch: r.GetGroupEpoch(), AssignorName: r.GetAssignorName(),
		AssignorVersion: r.GetAssignorVersion(), Members: map[string]SpecMember{},
		Topics: map[string]SpecTopic{}}
	for _, pm := range r.GetMembers() {
		sm := SpecMember{MemberID: pm.GetMemberId(), InstanceID: pm.GetInstanceId(),
			RackID: pm.GetRackId(), SubscribedTopicIDs: pm.GetSubscribedTopicIds(),
			MetadataVersion: pm.GetAssignor().GetMetadataVersion(),
			MetadataBytes:   pm.GetAssignor().GetMetadataBytes(),
			Target:          map[string][]int32{}, Type: pm.GetMemberType()}
		for _, t := range pm.GetTargetPartitions() {
			sm.Target[t.GetTopicId()] = t.GetPartitions()
		}
		spec.Members[sm.MemberID] = sm
	}
	for _, t := range r.GetTopics() {
		spec.Topics[t.GetTopicId()] = SpecTopic{ID: t.GetTopicId(), Name: t.GetTopicName(),
			NumPartitions: t.GetNumPartitions()}
	}
	return spec
}
