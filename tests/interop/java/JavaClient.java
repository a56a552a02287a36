// Apache Kafka's own Java client, driven by the interop tests (tests/interop/java_client.py).
// Prints one JSON object per line on stdout; errors go to stderr.
//
//   JavaClient <bootstrap> consume <group> topics|pattern <topics,...|regex>
//       KIP-848 consumer (group.protocol=consumer). Prints every assignment change and commits
//       offset 100 + partition for what it owns; closes (leaving the group) when stdin closes.
//   JavaClient <bootstrap> describe-by-ids <topic> [<topic> ...]
//       Looks the topics' ids up by name, then describes them by id only.

import java.io.InputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class JavaClient {
  public static void main(String[] args) throws Exception {
    String bootstrap = args[0];
    switch (args[1]) {
      case "consume" -> consume(bootstrap, args[2], args[3], args[4]);
      case "describe-by-ids" -> describeByIds(bootstrap, Arrays.copyOfRange(args, 2, args.length));
      default -> throw new IllegalArgumentException("unknown command " + args[1]);
    }
  }

  static String quote(String s) {
    return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }

  static String partitions(Collection<TopicPartition> parts) {
    List<String> out = new ArrayList<>();
    for (TopicPartition tp : sorted(parts)) {
      out.add("[" + quote(tp.topic()) + "," + tp.partition() + "]");
    }
    return "[" + String.join(",", out) + "]";
  }

  static Collection<TopicPartition> sorted(Collection<TopicPartition> parts) {
    TreeSet<TopicPartition> set = new TreeSet<>((a, b) -> a.topic().equals(b.topic())
        ? Integer.compare(a.partition(), b.partition()) : a.topic().compareTo(b.topic()));
    set.addAll(parts);
    return set;
  }

  static synchronized void emit(String json) {
    System.out.println(json);
    System.out.flush();
  }

  static void consume(String bootstrap, String group, String mode, String spec) throws Exception {
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap);
    p.put("group.id", group);
    p.put("group.protocol", "consumer");
    p.put("enable.auto.commit", "false");
    p.put("client.id", group + "-java");
    p.put("key.deserializer", ByteArrayDeserializer.class.getName());
    p.put("value.deserializer", ByteArrayDeserializer.class.getName());
    AtomicBoolean stop = new AtomicBoolean(false);
    Thread stdin = new Thread(() -> {
      try {
        InputStream in = System.in;
        while (in.read() != -1) { }
      } catch (Exception e) {
        // closed
      }
      stop.set(true);
    });
    stdin.setDaemon(true);
    stdin.start();
    try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
      ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> parts) { }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> parts) { }
      };
      if (mode.equals("pattern")) {
        consumer.subscribe(new SubscriptionPattern(spec), listener);
      } else {
        consumer.subscribe(Arrays.asList(spec.split(",")), listener);
      }
      Set<TopicPartition> last = null;
      while (!stop.get()) {
        consumer.poll(Duration.ofMillis(100));
        Set<TopicPartition> now = new HashSet<>(consumer.assignment());
        if (now.equals(last)) {
          continue;
        }
        last = now;
        emit("{\"event\":\"assignment\",\"partitions\":" + partitions(now) + "}");
        if (now.isEmpty()) {
          continue;
        }
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (TopicPartition tp : now) {
          offsets.put(tp, new OffsetAndMetadata(100 + tp.partition()));
        }
        try {
          consumer.commitSync(offsets, Duration.ofSeconds(10));
          emit("{\"event\":\"committed\",\"partitions\":" + partitions(now) + "}");
        } catch (Exception e) {
          // a rebalance moved on meanwhile: the next assignment commits again
          emit("{\"event\":\"commit_failed\",\"error\":" + quote(e.toString()) + "}");
        }
      }
    }
    emit("{\"event\":\"closed\"}");
  }

  static void describeByIds(String bootstrap, String[] topics) throws Exception {
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap);
    try (Admin admin = Admin.create(p)) {
      Map<String, TopicDescription> byName =
          admin.describeTopics(TopicCollection.ofTopicNames(Arrays.asList(topics)))
              .allTopicNames().get();
      List<Uuid> ids = new ArrayList<>();
      for (String t : topics) {
        ids.add(byName.get(t).topicId());
      }
      Map<Uuid, TopicDescription> byId =
          admin.describeTopics(TopicCollection.ofTopicIds(ids)).allTopicIds().get();
      for (Uuid id : ids) {
        TopicDescription d = byId.get(id);
        emit("{\"id\":" + quote(id.toString()) + ",\"name\":" + quote(d.name())
            + ",\"partitions\":" + d.partitions().size() + "}");
      }
    }
  }
}
