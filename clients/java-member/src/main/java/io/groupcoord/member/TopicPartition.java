package io.groupcoord.member;

import java.util.Comparator;

/** A partition of a topic, named by the topic's name. Ordered by topic, then partition. */
public record TopicPartition(String topic, int partition) implements Comparable<TopicPartition> {
  private static final Comparator<TopicPartition> ORDER =
      Comparator.comparing(TopicPartition::topic).thenComparingInt(TopicPartition::partition);

  public TopicPartition {
    if (topic == null) {
      throw new NullPointerException("topic");
    }
  }

  @Override
  public int compareTo(TopicPartition other) {
    return ORDER.compare(this, other);
  }

  @Override
  public String toString() {
    return topic + "-" + partition;
  }
}
