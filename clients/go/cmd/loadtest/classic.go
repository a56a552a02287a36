package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	gcv1 "github.com/groupcoord/groupcoord/gen/go/groupcoord/v1"
	"google.golang.org/protobuf/proto"
)

// Classic (eager) consumers of protocol type "consumer", as loadtest/members.py's
// ClassicMember: JoinGroup (MEMBER_ID_REQUIRED answered by joining again with the given id),
// the leader computes a range assignment over the members it is given, SyncGroup, Heartbeat
// every classic_heartbeat_interval_ms; on REBALANCE_IN_PROGRESS commit, give up everything and
// rejoin; on ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID rejoin without committing; on close commit
// and LeaveGroup (dynamic members; static members just stop, as Kafka's do).

const (
	illegalGeneration   = 22
	rebalanceInProgress = 27
	memberIDRequired    = 79
)

// Kafka's ConsumerProtocolSubscription / ConsumerProtocolAssignment, version 3 (big-endian;
// strings: int16 length, bytes and arrays: int32 length, -1 = null).
func putString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func encodeSubscription(topic string) []byte {
	b := binary.BigEndian.AppendUint16(nil, 3)
	b = binary.BigEndian.AppendUint32(b, 1)
	b = putString(b, topic)
	b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF) // user data: null
	b = binary.BigEndian.AppendUint32(b, 0)          // owned partitions: none
	b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF) // generation id -1
	return binary.BigEndian.AppendUint16(b, 0xFFFF)  // rack id: null
}

func encodeAssignment(topic string, ps []int32) []byte {
	b := binary.BigEndian.AppendUint16(nil, 3)
	if len(ps) == 0 {
		b = binary.BigEndian.AppendUint32(b, 0)
	} else {
		b = binary.BigEndian.AppendUint32(b, 1)
		b = putString(b, topic)
		b = binary.BigEndian.AppendUint32(b, uint32(len(ps)))
		for _, p := range ps {
			b = binary.BigEndian.AppendUint32(b, uint32(p))
		}
	}
	return binary.BigEndian.AppendUint32(b, 0xFFFFFFFF) // user data: null
}

// decodeAssignment: the partitions of topic in a consumer-protocol assignment (empty: none).
func decodeAssignment(data []byte, topic string) ([]int32, error) {
	if len(data) == 0 {
		return nil, nil
	}
	pos := 0
	need := func(n int) error {
		if pos+n > len(data) {
			return fmt.Errorf("truncated consumer protocol assignment")
		}
		return nil
	}
	i16 := func() (int, error) {
		if err := need(2); err != nil {
			return 0, err
		}
		v := int(int16(binary.BigEndian.Uint16(data[pos:])))
		pos += 2
		return v, nil
	}
	i32 := func() (int32, error) {
		if err := need(4); err != nil {
			return 0, err
		}
		v := int32(binary.BigEndian.Uint32(data[pos:]))
		pos += 4
		return v, nil
	}
	if _, err := i16(); err != nil { // version
		return nil, err
	}
	n, err := i32()
	if err != nil {
		return nil, err
	}
	var out []int32
	for ; n > 0; n-- {
		l, err := i16()
		if err != nil {
			return nil, err
		}
		if err := need(max(l, 0)); err != nil {
			return nil, err
		}
		name := string(data[pos : pos+max(l, 0)])
		pos += max(l, 0)
		k, err := i32()
		if err != nil {
			return nil, err
		}
		for ; k > 0; k-- {
			p, err := i32()
			if err != nil {
				return nil, err
			}
			if name == topic {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// rangeAssignment: contiguous ranges of the partitions over the sorted member ids.
func rangeAssignment(members []string, partitions int) map[string][]int32 {
	ids := slices.Clone(members)
	slices.Sort(ids)
	out := map[string][]int32{}
	if len(ids) == 0 {
		return out
	}
	per, extra := partitions/len(ids), partitions%len(ids)
	start := 0
	for i, id := range ids {
		n := per
		if i < extra {
			n++
		}
		for p := start; p < start+n; p++ {
			out[id] = append(out[id], int32(p))
		}
		start += n
	}
	return out
}

func (m *member) setID(id string) {
	m.mu.Lock()
	m.id = id
	m.mu.Unlock()
}

// join: JoinGroup then SyncGroup; true when the member holds an assignment.
func (m *member) join(ctx context.Context) bool {
	s := m.r.s
	id, _, _ := m.snapshot()
	req := &gcv1.JoinGroupRequest{GroupId: m.group, SessionTimeoutMs: s.SessionTimeoutMs,
		RebalanceTimeoutMs: proto.Int32(s.RebalanceTimeoutMs), MemberId: id, ProtocolType: "consumer",
		Protocols: []*gcv1.JoinGroupRequestProtocol{{Name: "range", Metadata: encodeSubscription(m.r.topic)}}}
	if m.instanceID != "" {
		req.GroupInstanceId = proto.String(m.instanceID)
	}
	longPoll := time.Duration(s.RebalanceTimeoutMs)*time.Millisecond + 5*time.Second
	join, ok := call(m.r, ctx, "JoinGroup", m.group, longPoll,
		func(c context.Context, client gcv1.GroupCoordinatorClient) (*gcv1.JoinGroupResponse, error) {
			return client.JoinGroup(c, req)
		},
		func(x *gcv1.JoinGroupResponse) int32 { return x.GetErrorCode() })
	if !ok {
		return false
	}
	switch code := join.GetErrorCode(); {
	case code == memberIDRequired:
		m.setID(join.GetMemberId())
		return false
	case code != 0:
		if code == illegalGeneration || code == unknownMemberID {
			m.setID("")
		}
		return false
	}
	m.setID(join.GetMemberId())
	generation := join.GetGenerationId()
	var assignments []*gcv1.SyncGroupRequestAssignment
	if join.GetLeader() == join.GetMemberId() {
		var ids []string
		for _, jm := range join.GetMembers() {
			ids = append(ids, jm.GetMemberId())
		}
		plan := rangeAssignment(ids, m.r.s.Partitions)
		for _, id := range slices.Sorted(func(yield func(string) bool) {
			for id := range plan {
				if !yield(id) {
					return
				}
			}
		}) {
			assignments = append(assignments, &gcv1.SyncGroupRequestAssignment{
				MemberId: id, Assignment: encodeAssignment(m.r.topic, plan[id])})
		}
	}
	sreq := &gcv1.SyncGroupRequest{GroupId: m.group, GenerationId: generation, MemberId: join.GetMemberId(),
		ProtocolType: proto.String("consumer"), ProtocolName: proto.String("range"), Assignments: assignments}
	if m.instanceID != "" {
		sreq.GroupInstanceId = proto.String(m.instanceID)
	}
	sync, ok := call(m.r, ctx, "SyncGroup", m.group, longPoll,
		func(c context.Context, client gcv1.GroupCoordinatorClient) (*gcv1.SyncGroupResponse, error) {
			return client.SyncGroup(c, sreq)
		},
		func(x *gcv1.SyncGroupResponse) int32 { return x.GetErrorCode() })
	if !ok || sync.GetErrorCode() != 0 {
		return false
	}
	owned, err := decodeAssignment(sync.GetAssignment(), m.r.topic)
	if err != nil {
		m.r.stats.error("SyncGroup", "BAD_ASSIGNMENT", int(m.r.elapsed()))
		return false
	}
	m.mu.Lock()
	m.generation = generation
	m.mu.Unlock()
	m.take(owned)
	m.mu.Lock()
	m.epoch = generation
	m.mu.Unlock()
	return true
}

func (m *member) classicLoop(ctx context.Context) {
	s := m.r.s
	joined := false
	for !m.stopping() {
		if !joined {
			joined = m.join(ctx)
			if !joined {
				if m.isVanishing() {
					return
				}
				id, _, _ := m.snapshot()
				if id != "" {
					m.pause(50 * time.Millisecond)
				} else {
					m.pause(200 * time.Millisecond)
				}
			}
			continue
		}
		m.pause(time.Duration(s.ClassicHeartbeatMs) * time.Millisecond)
		if m.stopping() {
			break
		}
		id, _, _ := m.snapshot()
		m.mu.Lock()
		generation := m.generation
		m.mu.Unlock()
		req := &gcv1.HeartbeatRequest{GroupId: m.group, GenerationId: generation, MemberId: id}
		if m.instanceID != "" {
			req.GroupInstanceId = proto.String(m.instanceID)
		}
		resp, ok := call(m.r, ctx, "Heartbeat", m.group, 5*time.Second,
			func(c context.Context, client gcv1.GroupCoordinatorClient) (*gcv1.HeartbeatResponse, error) {
				return client.Heartbeat(c, req)
			},
			func(x *gcv1.HeartbeatResponse) int32 { return x.GetErrorCode() })
		if !ok {
			if m.isVanishing() {
				return
			}
			continue
		}
		code := resp.GetErrorCode()
		if code == 0 || code == rebalanceInProgress {
			m.r.owners.confirmed(m.group, m.name)
		}
		_, _, owned := m.snapshot()
		switch {
		case code == rebalanceInProgress: // eager: commit, revoke everything, rejoin
			m.commit(ctx, owned)
			m.giveUp(owned)
			joined = false
		case code == illegalGeneration || code == unknownMemberID:
			m.r.owners.fenced(m.group, m.name)
			m.giveUp(owned)
			if code == unknownMemberID {
				m.setID("")
			}
			joined = false
		case code == 0 && s.CommitIntervalS > 0 && time.Since(m.lastCommit) >= time.Duration(s.CommitIntervalS*float64(time.Second)) && len(owned) > 0:
			m.commit(ctx, owned)
		}
	}
	if m.isVanishing() {
		return // no commit, no leave
	}
	_, _, owned := m.snapshot()
	if joined && len(owned) > 0 {
		m.commit(ctx, owned)
	}
	m.giveUp(owned)
	id, _, _ := m.snapshot()
	if id != "" && m.instanceID == "" {
		call(m.r, ctx, "LeaveGroup", m.group, 5*time.Second,
			func(c context.Context, client gcv1.GroupCoordinatorClient) (*gcv1.LeaveGroupResponse, error) {
				return client.LeaveGroup(c, &gcv1.LeaveGroupRequest{GroupId: m.group,
					Members: []*gcv1.LeaveGroupMemberIdentity{{MemberId: id}}})
			},
			func(x *gcv1.LeaveGroupResponse) int32 {
				if x.GetErrorCode() != 0 {
					return x.GetErrorCode()
				}
				for _, lm := range x.GetMembers() {
					if lm.GetErrorCode() != 0 {
						return lm.GetErrorCode()
					}
				}
				return 0
			})
	}
}

// stableClassic: the group Stable, exactly the live members, all synced at the group's
// generation (a DescribeGroups without one -- Kafka's -- : all at one generation, each holding
// what the group says it assigned).
func (r *run) stableClassic(ctx context.Context, g *group) map[int32]string {
	g.mu.Lock()
	busy := g.starting > 0
	g.mu.Unlock()
	if busy {
		return nil
	}
	live := g.liveMembers()
	byID := map[string]*member{}
	for _, m := range live {
		id, _, _ := m.snapshot()
		if id == "" {
			return nil
		}
		byID[id] = m
	}
	if len(byID) == 0 {
		return nil
	}
	resp, ok := call(r, ctx, "DescribeGroups", g.name, 5*time.Second,
		func(c context.Context, client gcv1.GroupCoordinatorClient) (*gcv1.DescribeGroupsResponse, error) {
			return client.DescribeGroups(c, &gcv1.DescribeGroupsRequest{Groups: []string{g.name}})
		},
		func(x *gcv1.DescribeGroupsResponse) int32 {
			if len(x.GetGroups()) == 0 {
				return 0
			}
			return x.GetGroups()[0].GetErrorCode()
		})
	if !ok || len(resp.GetGroups()) == 0 {
		return nil
	}
	d := resp.GetGroups()[0]
	if d.GetErrorCode() != 0 || !strings.EqualFold(d.GetGroupState(), "stable") || len(d.GetMembers()) != len(byID) {
		return nil
	}
	for _, dm := range d.GetMembers() {
		if _, ok := byID[dm.GetMemberId()]; !ok {
			return nil
		}
	}
	out := map[int32]string{}
	if d.GetGenerationId() == 0 {
		epochs := map[int32]bool{}
		for _, m := range live {
			_, e, _ := m.snapshot()
			epochs[e] = true
		}
		if len(epochs) != 1 {
			return nil
		}
		for _, dm := range d.GetMembers() {
			assigned, err := decodeAssignment(dm.GetMemberAssignment(), r.topic)
			_, _, owned := byID[dm.GetMemberId()].snapshot()
			if err != nil || !slices.Equal(assigned, owned) {
				return nil
			}
		}
	}
	for _, m := range live {
		_, e, owned := m.snapshot()
		if d.GetGenerationId() != 0 && e != d.GetGenerationId() {
			return nil
		}
		for _, p := range owned {
			out[p] = m.name
		}
	}
	return out
}
