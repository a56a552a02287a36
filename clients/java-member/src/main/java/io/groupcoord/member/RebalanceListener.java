package io.groupcoord.member;

import java.util.Set;

/**
 * What the member tells its application about its partitions. The callbacks run on the
 * member's callback thread ({@code groupcoord-member-callbacks-<group id>}), one at a time and
 * in order, never on the heartbeat thread: the member keeps heartbeating while a callback
 * runs, so a callback may block (commit offsets, drain work) longer than the group's session
 * timeout. While onPartitionsRevoked runs, the member still reports the partitions it owned
 * before; the coordinator's rebalance timeout bounds how long a revocation may take (past it
 * the member is fenced: when the callback returns, what it still owns goes to {@link
 * #onPartitionsLost}, and it rejoins). Callbacks of one member never overlap, so they need no
 * locking among themselves; state they share with other threads of the application does.
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
