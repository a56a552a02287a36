package io.groupcoord.member;

import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * A client-side assignor (KIP-848; docs/client-side-assignors.md): when the coordinator
 * chooses this member to compute the group's target assignment, the member reads the group
 * (ConsumerGroupPrepareAssignment), calls {@link #assign} on its heartbeat thread and installs
 * the result (ConsumerGroupInstallAssignment). An assign that throws installs an error, and
 * the coordinator chooses another member.
 */
public interface ClientAssignor {
  /** The assignor's name, as every member of the group declares it. */
  String name();

  default int minimumVersion() {
    return 0;
  }

  default int maximumVersion() {
    return 0;
  }

  /** member id -> its partitions; members left out get nothing. */
  Map<String, Set<TopicPartition>> assign(GroupSpec group);

  /** What the coordinator gives the chosen member to compute with. */
  record GroupSpec(
      int groupEpoch,
      String assignorName,
      int assignorVersion,
      List<MemberSpec> members,
      /** subscribed topic name -> number of partitions */
      Map<String, Integer> topics) {}

  /** One member: its subscribed topics (that exist) and its current target (stickiness). */
  record MemberSpec(
      String memberId,
      String instanceId,
      String rackId,
      Set<String> subscribedTopics,
      Set<TopicPartition> currentTarget) {}
}
