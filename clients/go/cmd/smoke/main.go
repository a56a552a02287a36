// Command smoke runs one scenario against a groupcoord gRPC address with the generated Go
// stubs: health, a topic in the catalog, FindCoordinator, two KIP-848 members joining until
// the group is stable, OffsetCommit and OffsetFetch, both members leaving, and the group
// described as empty. It exits 0 on success; on failure it prints one line and exits 1.
//
//	go run ./cmd/smoke -group g -topic t localhost:50051
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	gcv1 "github.com/groupcoord/groupcoord/gen/go/groupcoord/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
)

const numPartitions = 4

func main() {
	group := flag.String("group", "smoke-go-"+randomID(), "consumer group id")
	topic := flag.String("topic", "smoke-go-"+randomID(), "topic created in the catalog")
	timeout := flag.Duration("timeout", 60*time.Second, "deadline for the whole scenario")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: smoke [-group G] [-topic T] [-timeout D] HOST:PORT")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, flag.Arg(0), *group, *topic); err != nil {
		fmt.Fprintf(os.Stderr, "smoke: FAILED: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("smoke: ok group=%s topic=%s\n", *group, *topic)
}

// committedOffset is what the smoke scenario commits for a partition (checked by the tests).
func committedOffset(partition int32) int64 { return 100 + 10*int64(partition) }

func run(ctx context.Context, address, group, topic string) error {
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial %s: %w", address, err)
	}
	defer conn.Close()

	health, err := healthpb.NewHealthClient(conn).Check(ctx,
		&healthpb.HealthCheckRequest{Service: "groupcoord.v1.GroupCoordinator"})
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	if health.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health: %s", health.GetStatus())
	}

	created, err := gcv1.NewTopicCatalogClient(conn).CreateTopics(ctx, &gcv1.CreateTopicsRequest{
		Topics: []*gcv1.CreatableTopic{{Name: topic, NumPartitions: numPartitions}},
	})
	if err != nil {
		return fmt.Errorf("CreateTopics: %w", err)
	}
	if t := created.GetTopics()[0]; t.GetErrorCode() != 0 {
		return fmt.Errorf("CreateTopics %s: error %d %s", topic, t.GetErrorCode(), t.GetErrorMessage())
	}

	// Every group lives on one shard: ask any shard which, and talk to that one.
	found, err := gcv1.NewGroupCoordinatorClient(conn).FindCoordinator(ctx,
		&gcv1.FindCoordinatorRequest{KeyType: 0, CoordinatorKeys: []string{group}})
	if err != nil {
		return fmt.Errorf("FindCoordinator: %w", err)
	}
	c := found.GetCoordinators()[0]
	if c.GetErrorCode() != 0 {
		return fmt.Errorf("FindCoordinator: error %d %s", c.GetErrorCode(), c.GetErrorMessage())
	}
	shardConn, err := grpc.NewClient(fmt.Sprintf("%s:%d", c.GetHost(), c.GetPort()),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial coordinator: %w", err)
	}
	defer shardConn.Close()
	coordinator := gcv1.NewGroupCoordinatorClient(shardConn)

	members := []*member{
		{id: randomID(), group: group, topic: topic},
		{id: randomID(), group: group, topic: topic},
	}
	if err := joinUntilStable(ctx, coordinator, members); err != nil {
		return err
	}

	for _, m := range members {
		if err := m.commit(ctx, coordinator); err != nil {
			return err
		}
	}
	if err := checkCommitted(ctx, coordinator, group, topic); err != nil {
		return err
	}

	for _, m := range members {
		resp, err := coordinator.ConsumerGroupHeartbeat(ctx, &gcv1.ConsumerGroupHeartbeatRequest{
			GroupId: group, MemberId: m.id, MemberEpoch: -1,
		})
		if err != nil {
			return fmt.Errorf("leave %s: %w", m.id, err)
		}
		if resp.GetErrorCode() != 0 || resp.GetMemberEpoch() != -1 {
			return fmt.Errorf("leave %s: error %d, epoch %d", m.id, resp.GetErrorCode(), resp.GetMemberEpoch())
		}
	}
	described, err := describe(ctx, coordinator, group)
	if err != nil {
		return err
	}
	if described.GetGroupState() != "Empty" || len(described.GetMembers()) != 0 {
		return fmt.Errorf("after both left: state %s with %d members, want Empty with none",
			described.GetGroupState(), len(described.GetMembers()))
	}
	return nil
}

// member is one KIP-848 consumer: its id (chosen by the client), epoch and owned partitions.
type member struct {
	id, group, topic string
	epoch            int32
	topicID          string  // the topic's id, as assignments name it ("" until assigned)
	owned            []int32 // partitions of topicID, sorted
	interval         time.Duration
}

// heartbeat sends one ConsumerGroupHeartbeat: the full request on joining (epoch 0), then
// the partitions the member owns, which acknowledges the assignment it was last given.
func (m *member) heartbeat(ctx context.Context, client gcv1.GroupCoordinatorClient) error {
	req := &gcv1.ConsumerGroupHeartbeatRequest{
		GroupId:     m.group,
		MemberId:    m.id,
		MemberEpoch: m.epoch,
		TopicPartitions: &gcv1.TopicPartitionsList{
			TopicPartitions: m.ownedList(),
		},
	}
	if m.epoch == 0 {
		req.RebalanceTimeoutMs = proto.Int32(30000)
		req.SubscribedTopicNames = &gcv1.StringList{Values: []string{m.topic}}
	}
	resp, err := client.ConsumerGroupHeartbeat(ctx, req)
	if err != nil {
		return fmt.Errorf("heartbeat %s: %w", m.id, err)
	}
	if resp.GetErrorCode() != 0 {
		return fmt.Errorf("heartbeat %s: error %d %s", m.id, resp.GetErrorCode(), resp.GetErrorMessage())
	}
	m.epoch = resp.GetMemberEpoch()
	m.interval = time.Duration(resp.GetHeartbeatIntervalMs()) * time.Millisecond
	if resp.GetAssignment() != nil { // unset = unchanged
		m.owned = nil
		for _, tp := range resp.GetAssignment().GetTopicPartitions() {
			if m.topicID != "" && tp.GetTopicId() != m.topicID {
				return fmt.Errorf("assigned topic id %s, then %s", m.topicID, tp.GetTopicId())
			}
			m.topicID = tp.GetTopicId()
			m.owned = append(m.owned, tp.GetPartitions()...)
		}
		slices.Sort(m.owned)
	}
	return nil
}

func (m *member) ownedList() []*gcv1.TopicPartitions {
	if len(m.owned) == 0 {
		return nil
	}
	return []*gcv1.TopicPartitions{{TopicId: m.topicID, Partitions: m.owned}}
}

// joinUntilStable heartbeats both members at the interval the coordinator asks for until the
// group is Stable and the members own disjoint, non-empty halves of the topic.
func joinUntilStable(ctx context.Context, client gcv1.GroupCoordinatorClient, members []*member) error {
	for {
		for _, m := range members {
			if err := m.heartbeat(ctx, client); err != nil {
				return err
			}
		}
		d, err := describe(ctx, client, members[0].group)
		if err != nil {
			return err
		}
		var all []int32
		for _, m := range members {
			if len(m.owned) == 0 {
				all = nil
				break
			}
			all = append(all, m.owned...)
		}
		slices.Sort(all)
		if d.GetGroupState() == "Stable" && len(all) == numPartitions &&
			slices.Equal(slices.Compact(all), []int32{0, 1, 2, 3}) &&
			members[0].epoch == d.GetGroupEpoch() && members[1].epoch == d.GetGroupEpoch() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("group %s not stable with both members assigned (state %s, owned %v and %v): %w",
				members[0].group, d.GetGroupState(), members[0].owned, members[1].owned, ctx.Err())
		case <-time.After(max(members[0].interval, 50*time.Millisecond)):
		}
	}
}

func describe(ctx context.Context, client gcv1.GroupCoordinatorClient, group string) (*gcv1.ConsumerGroupDescribedGroup, error) {
	resp, err := client.ConsumerGroupDescribe(ctx, &gcv1.ConsumerGroupDescribeRequest{GroupIds: []string{group}})
	if err != nil {
		return nil, fmt.Errorf("ConsumerGroupDescribe: %w", err)
	}
	g := resp.GetGroups()[0]
	if g.GetErrorCode() != 0 {
		return nil, fmt.Errorf("ConsumerGroupDescribe: error %d %s", g.GetErrorCode(), g.GetErrorMessage())
	}
	return g, nil
}

// commit commits committedOffset(p) for every partition p the member owns, at its epoch.
func (m *member) commit(ctx context.Context, client gcv1.GroupCoordinatorClient) error {
	var partitions []*gcv1.OffsetCommitRequestPartition
	for _, p := range m.owned {
		partitions = append(partitions, &gcv1.OffsetCommitRequestPartition{
			PartitionIndex:    p,
			CommittedOffset:   committedOffset(p),
			CommittedMetadata: proto.String("smoke-go"),
		})
	}
	resp, err := client.OffsetCommit(ctx, &gcv1.OffsetCommitRequest{
		GroupId:                   m.group,
		MemberId:                  m.id,
		GenerationIdOrMemberEpoch: proto.Int32(m.epoch),
		Topics:                    []*gcv1.OffsetCommitRequestTopic{{Name: m.topic, Partitions: partitions}},
	})
	if err != nil {
		return fmt.Errorf("OffsetCommit: %w", err)
	}
	for _, t := range resp.GetTopics() {
		for _, p := range t.GetPartitions() {
			if p.GetErrorCode() != 0 {
				return fmt.Errorf("OffsetCommit %s-%d: error %d %s", t.GetName(), p.GetPartitionIndex(), p.GetErrorCode(), p.GetErrorMessage())
			}
		}
	}
	return nil
}

// checkCommitted reads every committed offset of the group back and compares.
func checkCommitted(ctx context.Context, client gcv1.GroupCoordinatorClient, group, topic string) error {
	resp, err := client.OffsetFetch(ctx, &gcv1.OffsetFetchRequest{
		Groups: []*gcv1.OffsetFetchRequestGroup{{GroupId: group}},
	})
	if err != nil {
		return fmt.Errorf("OffsetFetch: %w", err)
	}
	g := resp.GetGroups()[0]
	if g.GetErrorCode() != 0 {
		return fmt.Errorf("OffsetFetch: error %d %s", g.GetErrorCode(), g.GetErrorMessage())
	}
	got := map[int32]int64{}
	for _, t := range g.GetTopics() {
		if t.GetName() != topic {
			return fmt.Errorf("OffsetFetch: unexpected topic %s", t.GetName())
		}
		for _, p := range t.GetPartitions() {
			if p.GetErrorCode() != 0 {
				return fmt.Errorf("OffsetFetch %s-%d: error %d", topic, p.GetPartitionIndex(), p.GetErrorCode())
			}
			got[p.GetPartitionIndex()] = p.GetCommittedOffset()
		}
	}
	var errs []string
	for p := int32(0); p < numPartitions; p++ {
		if got[p] != committedOffset(p) {
			errs = append(errs, fmt.Sprintf("%s-%d committed %d, want %d", topic, p, got[p], committedOffset(p)))
		}
	}
	if len(got) != numPartitions {
		errs = append(errs, fmt.Sprintf("OffsetFetch: %d partitions, want %d", len(got), numPartitions))
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

func randomID() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
