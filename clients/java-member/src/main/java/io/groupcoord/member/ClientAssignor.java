package io.groupcoord.member;

import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

/**
 * A client-side assignor (KIP-848; docs/client-side-assignors.md). The member declares it
 * in its heartbeats -- name, version range, {@link #reason()} and this member's {@link
 * #metadata()} -- and when the coordinator chooses this member to compute the group's target
 * assignment, the member reads the group (ConsumerGroupPrepareAssignment: every member with
 * its metadata for the assignor), calls {@link #assignWithMetadata} (by default {@link
 * #assign}) on the member's call pool -- not on its heartbeat thread, so the heartbeats go on
 * while it computes -- and installs the result (ConsumerGroupInstallAssignment). An assign
 * that throws installs an error, and the coordinator chooses another member.
 *
 * <p>{@link #metadata()} and {@link #reason()} are read on the heartbeat thread before each
 * heartbeat: a change is declared at once, which asks the group for a new assignment. They
 * must be cheap and must not block.
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

  /** This member's metadata for the assignor (default: the maximum version, no bytes). */
  default Metadata metadata() {
    return new Metadata(maximumVersion(), new byte[0]);
  }

  /** A value the member changes to ask for a new assignment (KIP-848's Reason). */
  default int reason() {
    return 0;
  }

  /** member id -> its partitions; members left out get nothing. */
  Map<String, Set<TopicPartition>> assign(GroupSpec group);

  /**
   * member id -> its partitions with the metadata the assignor gives it (the member reads it
   * as {@link GroupMember#assignmentMetadata()}); members left out get nothing. By default
   * {@link #assign} with no metadata.
   */
  default Map<String, MemberAssignment> assignWithMetadata(GroupSpec group) {
    Map<String, MemberAssignment> out = new TreeMap<>();
    assign(group).forEach((member, partitions) -> out.put(member, new MemberAssignment(partitions)));
    return out;
  }

  /** A member's metadata for an assignor: the version it is in, and its bytes. */
  record Metadata(int version, byte[] bytes) {}

  /** What the coordinator gives the chosen member to compute with. */
  record GroupSpec(
      int groupEpoch,
      String assignorName,
      int assignorVersion,
      List<MemberSpec> members,
      /** subscribed topic name -> number of partitions */
      Map<String, Integer> topics) {}

  /**
   * One member: its subscribed topics (that exist), its current target (stickiness), its
   * metadata for the group's assignor as it declared it, and its type ("consumer", or
   * "classic" for a classic-protocol member during an online migration: metadata version -1,
   * its subscription as bytes).
   */
  record MemberSpec(
      String memberId,
      String instanceId,
      String rackId,
      Set<String> subscribedTopics,
      Set<TopicPartition> currentTarget,
      int metadataVersion,
      byte[] metadataBytes,
      String memberType) {}

  /** One member's target: its partitions, the assignor's metadata for it, KIP-848's error. */
  record MemberAssignment(
      Set<TopicPartition> partitions, int metadataVersion, byte[] metadataBytes, int error) {
    public MemberAssignment(Set<TopicPartition> partitions) {
      this(partitions, 0, new byte[0], 0);
    }
  }

  /** What the group's assignor gave this member with its assignment. */
  record AssignmentMetadata(int version, byte[] bytes, int error) {}
}
