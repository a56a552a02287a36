package io.groupcoord.smoke;

import io.groupcoord.v1.ConsumerGroupDescribeRequest;
import io.groupcoord.v1.ConsumerGroupDescribedGroup;
import io.groupcoord.v1.ConsumerGroupHeartbeatRequest;
import io.groupcoord.v1.ConsumerGroupHeartbeatResponse;
import io.groupcoord.v1.Coordinator;
import io.groupcoord.v1.CreatableTopic;
import io.groupcoord.v1.CreatableTopicResult;
import io.groupcoord.v1.CreateTopicsRequest;
import io.groupcoord.v1.FindCoordinatorRequest;
import io.groupcoord.v1.GroupCoordinatorGrpc;
import io.groupcoord.v1.GroupCoordinatorGrpc.GroupCoordinatorBlockingStub;
import io.groupcoord.v1.OffsetCommitRequest;
import io.groupcoord.v1.OffsetCommitRequestPartition;
import io.groupcoord.v1.OffsetCommitRequestTopic;
import io.groupcoord.v1.OffsetCommitResponse;
import io.groupcoord.v1.OffsetCommitResponsePartition;
import io.groupcoord.v1.OffsetCommitResponseTopic;
import io.groupcoord.v1.OffsetFetchRequest;
import io.groupcoord.v1.OffsetFetchRequestGroup;
import io.groupcoord.v1.OffsetFetchResponseGroup;
import io.groupcoord.v1.OffsetFetchResponsePartitions;
import io.groupcoord.v1.OffsetFetchResponseTopics;
import io.groupcoord.v1.StringList;
import io.groupcoord.v1.TopicCatalogGrpc;
import io.groupcoord.v1.TopicPartitions;
import io.groupcoord.v1.TopicPartitionsList;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.health.v1.HealthCheckRequest;
import io.grpc.health.v1.HealthCheckResponse.ServingStatus;
import io.grpc.health.v1.HealthGrpc;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

/**
 * One scenario against a groupcoord gRPC address with the generated Java stubs: health, a topic
 * in the catalog, FindCoordinator, two KIP-848 members joining until the group is stable,
 * OffsetCommit and OffsetFetch, both members leaving, and the group described as empty. Exits 0
 * on success; on failure prints one line and exits 1.
 *
 * <pre>java -cp ... io.groupcoord.smoke.Smoke [--group G] [--topic T] HOST:PORT</pre>
 */
public final class Smoke {
  static final int NUM_PARTITIONS = 4;
  static final long DEADLINE_MS = 60_000;

  /** What the scenario commits for a partition (the tests check it). */
  static long committedOffset(int partition) {
    return 200 + 10L * partition;
  }

  public static void main(String[] args) {
    String group = "smoke-java-" + shortId();
    String topic = "smoke-java-" + shortId();
    String address = null;
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--group" -> group = args[++i];
        case "--topic" -> topic = args[++i];
        default -> address = args[i];
      }
    }
    if (address == null) {
      System.err.println("usage: Smoke [--group G] [--topic T] HOST:PORT");
      System.exit(2);
    }
    try {
      new Smoke(group, topic).run(address);
    } catch (Exception e) {
      String why = e.getMessage() != null ? e.getMessage() : e.toString();
      System.err.println("smoke: FAILED: " + why.replace('\n', ' '));
      System.exit(1);
    }
    System.out.println("smoke: ok group=" + group + " topic=" + topic);
  }

  private final String group;
  private final String topic;
  private final long deadline = System.currentTimeMillis() + DEADLINE_MS;
  /** The group's coordinator (from FindCoordinator), once known. */
  private GroupCoordinatorBlockingStub stub;

  Smoke(String group, String topic) {
    this.group = group;
    this.topic = topic;
  }

  void run(String address) throws Exception {
    ManagedChannel channel =
        Grpc.newChannelBuilder(address, InsecureChannelCredentials.create()).build();
    try {
      var health =
          HealthGrpc.newBlockingStub(channel)
              .withDeadlineAfter(10, TimeUnit.SECONDS)
              .check(
                  HealthCheckRequest.newBuilder()
                      .setService("groupcoord.v1.GroupCoordinator")
                      .build());
      check(health.getStatus() == ServingStatus.SERVING, "health: " + health.getStatus());

      CreatableTopicResult created =
          TopicCatalogGrpc.newBlockingStub(channel)
              .withDeadlineAfter(10, TimeUnit.SECONDS)
              .createTopics(
                  CreateTopicsRequest.newBuilder()
                      .addTopics(
                          CreatableTopic.newBuilder()
                              .setName(topic)
                              .setNumPartitions(NUM_PARTITIONS))
                      .build())
              .getTopics(0);
      check(
          created.getErrorCode() == 0,
          "CreateTopics " + topic + ": error " + created.getErrorCode() + " "
              + created.getErrorMessage());

      // Every group lives on one shard: ask any shard which, and talk to that one.
      Coordinator c =
          GroupCoordinatorGrpc.newBlockingStub(channel)
              .withDeadlineAfter(10, TimeUnit.SECONDS)
              .findCoordinator(
                  FindCoordinatorRequest.newBuilder()
                      .setKeyType(0)
                      .addCoordinatorKeys(group)
                      .build())
              .getCoordinators(0);
      check(c.getErrorCode() == 0, "FindCoordinator: error " + c.getErrorCode());
      ManagedChannel shard =
          Grpc.newChannelBuilder(
                  c.getHost() + ":" + c.getPort(), InsecureChannelCredentials.create())
              .build();
      try {
        onCoordinator(GroupCoordinatorGrpc.newBlockingStub(shard));
      } finally {
        shard.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
      }
    } finally {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  private GroupCoordinatorBlockingStub call() {
    return stub.withDeadlineAfter(Math.max(1, deadline - System.currentTimeMillis()),
        TimeUnit.MILLISECONDS);
  }

  private void onCoordinator(GroupCoordinatorBlockingStub coordinator) throws Exception {
    stub = coordinator;
    List<Member> members = List.of(new Member(shortId()), new Member(shortId()));
    joinUntilStable(members);

    for (Member m : members) {
      m.commit();
    }
    checkCommitted();

    for (Member m : members) {
      ConsumerGroupHeartbeatResponse left =
          call()
              .consumerGroupHeartbeat(
                  ConsumerGroupHeartbeatRequest.newBuilder()
                      .setGroupId(group)
                      .setMemberId(m.id)
                      .setMemberEpoch(-1)
                      .build());
      check(
          left.getErrorCode() == 0 && left.getMemberEpoch() == -1,
          "leave " + m.id + ": error " + left.getErrorCode() + ", epoch " + left.getMemberEpoch());
    }
    ConsumerGroupDescribedGroup described = describe();
    check(
        described.getGroupState().equals("Empty") && described.getMembersCount() == 0,
        "after both left: state " + described.getGroupState() + " with "
            + described.getMembersCount() + " members, want Empty with none");
  }

  /** One KIP-848 consumer: its id (chosen by the client), epoch and owned partitions. */
  final class Member {
    final String id;
    int epoch = 0;
    String topicId = "";
    List<Integer> owned = List.of();
    long intervalMs = 100;

    Member(String id) {
      this.id = id;
    }

    /**
     * One ConsumerGroupHeartbeat: the full request on joining (epoch 0), then the partitions
     * the member owns, which acknowledges the assignment it was last given.
     */
    void heartbeat() {
      TopicPartitionsList.Builder ownedList = TopicPartitionsList.newBuilder();
      if (!owned.isEmpty()) {
        ownedList.addTopicPartitions(
            TopicPartitions.newBuilder().setTopicId(topicId).addAllPartitions(owned));
      }
      ConsumerGroupHeartbeatRequest.Builder request =
          ConsumerGroupHeartbeatRequest.newBuilder()
              .setGroupId(group)
              .setMemberId(id)
              .setMemberEpoch(epoch)
              .setTopicPartitions(ownedList);
      if (epoch == 0) {
        request
            .setRebalanceTimeoutMs(30_000)
            .setSubscribedTopicNames(StringList.newBuilder().addValues(topic));
      }
      ConsumerGroupHeartbeatResponse response = call().consumerGroupHeartbeat(request.build());
      check(
          response.getErrorCode() == 0,
          "heartbeat " + id + ": error " + response.getErrorCode() + " "
              + response.getErrorMessage());
      epoch = response.getMemberEpoch();
      intervalMs = response.getHeartbeatIntervalMs();
      if (response.hasAssignment()) { // unset = unchanged
        List<Integer> assigned = new ArrayList<>();
        for (TopicPartitions tp : response.getAssignment().getTopicPartitionsList()) {
          check(
              topicId.isEmpty() || topicId.equals(tp.getTopicId()),
              "assigned topic id " + topicId + ", then " + tp.getTopicId());
          topicId = tp.getTopicId();
          assigned.addAll(tp.getPartitionsList());
        }
        assigned.sort(null);
        owned = List.copyOf(assigned);
      }
    }

    /** Commits committedOffset(p) for every partition p the member owns, at its epoch. */
    void commit() {
      OffsetCommitRequestTopic.Builder partitions = OffsetCommitRequestTopic.newBuilder()
          .setName(topic);
      for (int p : owned) {
        partitions.addPartitions(
            OffsetCommitRequestPartition.newBuilder()
                .setPartitionIndex(p)
                .setCommittedOffset(committedOffset(p))
                .setCommittedMetadata("smoke-java"));
      }
      OffsetCommitResponse response =
          call()
              .offsetCommit(
                  OffsetCommitRequest.newBuilder()
                      .setGroupId(group)
                      .setMemberId(id)
                      .setGenerationIdOrMemberEpoch(epoch)
                      .addTopics(partitions)
                      .build());
      for (OffsetCommitResponseTopic t : response.getTopicsList()) {
        for (OffsetCommitResponsePartition p : t.getPartitionsList()) {
          check(
              p.getErrorCode() == 0,
              "OffsetCommit " + t.getName() + "-" + p.getPartitionIndex() + ": error "
                  + p.getErrorCode() + " " + p.getErrorMessage());
        }
      }
    }
  }

  /**
   * Heartbeats both members at the interval the coordinator asks for until the group is Stable
   * and the members own disjoint, non-empty shares of the topic.
   */
  private void joinUntilStable(List<Member> members) throws InterruptedException {
    while (true) {
      for (Member m : members) {
        m.heartbeat();
      }
      ConsumerGroupDescribedGroup d = describe();
      List<Integer> all = new ArrayList<>();
      boolean everyoneAssigned = true;
      boolean atGroupEpoch = true;
      for (Member m : members) {
        everyoneAssigned &= !m.owned.isEmpty();
        atGroupEpoch &= m.epoch == d.getGroupEpoch();
        all.addAll(m.owned);
      }
      all.sort(null);
      if (d.getGroupState().equals("Stable") && everyoneAssigned && atGroupEpoch
          && all.equals(List.of(0, 1, 2, 3))) {
        return;
      }
      check(
          System.currentTimeMillis() < deadline,
          "group " + group + " not stable with both members assigned (state "
              + d.getGroupState() + ", owned " + members.get(0).owned + " and "
              + members.get(1).owned + ")");
      Thread.sleep(Math.max(50, members.get(0).intervalMs));
    }
  }

  private ConsumerGroupDescribedGroup describe() {
    ConsumerGroupDescribedGroup g =
        call()
            .consumerGroupDescribe(
                ConsumerGroupDescribeRequest.newBuilder().addGroupIds(group).build())
            .getGroups(0);
    check(g.getErrorCode() == 0, "ConsumerGroupDescribe: error " + g.getErrorCode());
    return g;
  }

  /** Reads every committed offset of the group back and compares. */
  private void checkCommitted() {
    OffsetFetchResponseGroup g =
        call()
            .offsetFetch(
                OffsetFetchRequest.newBuilder()
                    .addGroups(OffsetFetchRequestGroup.newBuilder().setGroupId(group))
                    .build())
            .getGroups(0);
    check(g.getErrorCode() == 0, "OffsetFetch: error " + g.getErrorCode());
    TreeMap<Integer, Long> got = new TreeMap<>();
    for (OffsetFetchResponseTopics t : g.getTopicsList()) {
      check(t.getName().equals(topic), "OffsetFetch: unexpected topic " + t.getName());
      for (OffsetFetchResponsePartitions p : t.getPartitionsList()) {
        check(p.getErrorCode() == 0, "OffsetFetch: error " + p.getErrorCode());
        got.put(p.getPartitionIndex(), p.getCommittedOffset());
      }
    }
    TreeMap<Integer, Long> want = new TreeMap<>();
    for (int p = 0; p < NUM_PARTITIONS; p++) {
      want.put(p, committedOffset(p));
    }
    check(got.equals(want), "OffsetFetch: committed " + got + ", want " + want);
  }

  private static void check(boolean ok, String failure) {
    if (!ok) {
      throw new IllegalStateException(failure);
    }
  }

  private static String shortId() {
    return UUID.randomUUID().toString().replace("-", "").substring(0, 16);
  }
}
