package io.groupcoord.member;

import java.util.Set;

/**
 * What the member tells its application about its partitions. The callbacks run on the
 * member's heartbeat thread, one at a time, and the member waits for each to return: a
 * callback may block (commit offsets, drain work), but a callback that blocks past the
 * group's session timeout gets the member fenced, which it notices on its next heartbeat
 * ({@link #onPartitionsLost}).
 *
 * <p>Order: partitions taken away are always revoked (and the revocation reported to the
 * coordinator) before any newly assigned partition is given to {@link #onPartitionsAssigned}.
 */
public interface RebalanceListener {
  /** Partitions the member now owns in addition to what it owned (never empty). */
  void onPartitionsAssigned(Set<TopicPartition> partitions);

  /**
   * Partitions the member gives up in an orderly way (a rebalance, or {@link
   * GroupMember#close()}); the coordinator gives them to another member only after this
   * returns. Never empty.
   */
  void onPartitionsRevoked(Set<TopicPartition> partitions);

  /**
   * Partitions the member has lost without a chance to revoke them: it was fenced (session
   * expired, epoch fenced) and another member may already own them. By default the same as a
   * revocation. Never empty.
   */
  default void onPartitionsLost(Set<TopicPartition> partitions) {
    onPartitionsRevoked(partitions);
  }
}
