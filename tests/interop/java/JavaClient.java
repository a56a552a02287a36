// Apache Kafka's own Java client, driven by the interop tests (tests/interop/java_client.py).
// Prints one JSON object per line on stdout; errors go to stderr.
//
//   JavaClient <bootstrap> consume <group> topics|pattern <topics,...|regex>
//       KIP-848 consumer (group.protocol=consumer). Prints every assignment change and commits
//       offset 100 + partition for what it owns; closes (leaving the group) when stdin closes.
//   JavaClient <bootstrap> describe-by-ids <topic> [<topic> ...]
//       Looks the topics' ids up by name, then describes them by id only.
//   JavaClient <bootstrap> produce <topic> <n>
//       Produces n records (key "key-<i % 97>", value "value-<i>", acks=all, idempotent).
//   JavaClient <bootstrap> drain <group> <topic>
//       KIP-848 consumer reading the topic from the earliest offset; after every poll that
//       returned records commits (commitSync) and prints them; closes when stdin closes.
//   JavaClient <bootstrap> group <group> <topic>
//       Admin: describeConsumerGroups, the group's committed offsets (listConsumerGroupOffsets)
//       and the topic's end offsets (listOffsets latest), as one JSON object.
//
// Every client also gets the properties of the file named by $JAVA_CLIENT_PROPERTIES, if set
// (security.protocol, sasl.mechanism, sasl.jaas.config, ...).

import java.io.InputStream;
import java.lang.management.ManagementFactory;
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
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class JavaClient {
  public static void main(String[] args) throws Exception {
    String bootstrap = args[0];
    switch (args[1]) {
      case "consume" -> consume(bootstrap, args[2], args[3], args[4]);
      case "describe-by-ids" -> describeByIds(bootstrap, Arrays.copyOfRange(args, 2, args.length));
      case "produce" -> produce(bootstrap, args[2], Integer.parseInt(args[3]));
      case "drain" -> drain(bootstrap, args[2], args[3]);
      case "group" -> group(bootstrap, args[2], args[3]);
      case "idle" -> idle(bootstrap, args[2], args[3], args[4], args[5], args[6]);
      default -> throw new IllegalArgumentException("unknown command " + args[1]);
    }
  }

  static void extra(Properties p) throws java.io.IOException {
    String file = System.getenv("JAVA_CLIENT_PROPERTIES");
    if (file != null && !file.isEmpty()) {
      try (java.io.FileReader r = new java.io.FileReader(file)) {
        p.load(r);
      }
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
    extra(p);
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
    extra(p);
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

  static Thread stdinWatcher(AtomicBoolean stop) {
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
    return stdin;
  }

  static void produce(String bootstrap, String topic, int n) throws Exception {
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap);
    extra(p);
    p.put("acks", "all");
    p.put("linger.ms", "5");
    p.put("key.serializer", StringSerializer.class.getName());
    p.put("value.serializer", StringSerializer.class.getName());
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
      List<java.util.concurrent.Future<org.apache.kafka.clients.producer.RecordMetadata>> sent =
          new ArrayList<>();
      for (int i = 0; i < n; i++) {
        sent.add(producer.send(new ProducerRecord<>(topic, "key-" + (i % 97), "value-" + i)));
      }
      producer.flush();
      for (var f : sent) {
        f.get();
      }
    }
    emit("{\"event\":\"produced\",\"count\":" + n + "}");
  }

  static void drain(String bootstrap, String group, String topic) throws Exception {
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap);
    extra(p);
    p.put("group.id", group);
    p.put("group.protocol", "consumer");
    p.put("enable.auto.commit", "false");
    p.put("auto.offset.reset", "earliest");
    p.put("client.id", group + "-java");
    p.put("key.deserializer", ByteArrayDeserializer.class.getName());
    p.put("value.deserializer", ByteArrayDeserializer.class.getName());
    AtomicBoolean stop = new AtomicBoolean(false);
    stdinWatcher(stop);
    try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
      consumer.subscribe(List.of(topic));
      Set<TopicPartition> last = null;
      while (!stop.get()) {
        ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
        Set<TopicPartition> now = new HashSet<>(consumer.assignment());
        if (!now.equals(last)) {
          last = now;
          emit("{\"event\":\"assignment\",\"partitions\":" + partitions(now) + "}");
        }
        if (records.isEmpty()) {
          continue;
        }
        List<String> seen = new ArrayList<>();
        for (ConsumerRecord<byte[], byte[]> r : records) {
          seen.add("[" + r.partition() + "," + r.offset() + "]");
        }
        String committed = "true";
        try {
          consumer.commitSync(Duration.ofSeconds(10));
        } catch (Exception e) {
          // a rebalance moved a partition meanwhile: its new owner reads it from the commit
          committed = "false";
          emit("{\"event\":\"commit_failed\",\"error\":" + quote(e.toString()) + "}");
        }
        emit("{\"event\":\"consumed\",\"committed\":" + committed + ",\"records\":["
            + String.join(",", seen) + "]}");
      }
    }
    emit("{\"event\":\"closed\"}");
  }

  static void group(String bootstrap, String group, String topic) throws Exception {
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap);
    extra(p);
    try (Admin admin = Admin.create(p)) {
      ConsumerGroupDescription d =
          admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get();
      List<String> members = new ArrayList<>();
      for (MemberDescription m : d.members()) {
        members.add("{\"member_id\":" + quote(m.consumerId()) + ",\"client_id\":"
            + quote(m.clientId()) + ",\"member_epoch\":" + m.memberEpoch().orElse(-1)
            + ",\"assignment\":" + partitions(m.assignment().topicPartitions())
            + ",\"target_assignment\":"
            + partitions(m.targetAssignment().map(a -> a.topicPartitions()).orElse(Set.of()))
            + "}");
      }
      Map<TopicPartition, OffsetAndMetadata> committed =
          admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
      List<String> offsets = new ArrayList<>();
      for (TopicPartition tp : sorted(committed.keySet())) {
        offsets.add("[" + quote(tp.topic()) + "," + tp.partition() + ","
            + committed.get(tp).offset() + "]");
      }
      TopicDescription td =
          admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
      Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
      for (TopicPartitionInfo info : td.partitions()) {
        latest.put(new TopicPartition(topic, info.partition()), OffsetSpec.latest());
      }
      Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> ends =
          admin.listOffsets(latest).all().get();
      List<String> endOffsets = new ArrayList<>();
      for (TopicPartition tp : sorted(ends.keySet())) {
        endOffsets.add("[" + quote(tp.topic()) + "," + tp.partition() + ","
            + ends.get(tp).offset() + "]");
      }
      emit("{\"group_id\":" + quote(d.groupId()) + ",\"state\":" + quote(d.groupState().toString())
          + ",\"type\":" + quote(d.type().toString())
          + ",\"group_epoch\":" + d.groupEpoch().orElse(-1)
          + ",\"assignment_epoch\":" + d.targetAssignmentEpoch().orElse(-1)
          + ",\"assignor\":" + quote(d.partitionAssignor())
          + ",\"coordinator\":" + d.coordinator().id()
          + ",\"members\":[" + String.join(",", members) + "]"
          + ",\"committed\":[" + String.join(",", offsets) + "]"
          + ",\"end_offsets\":[" + String.join(",", endOffsets) + "]}");
    }
  }

  static long cpuMs() {
    return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
        .getProcessCpuTime() / 1_000_000;
  }

  /** A consumer that reads nothing (``group.protocol`` = protocol; ``group.instance.id`` =
   * instance unless "-"; more properties as "k=v,k=v" or "-"): polls every 100 ms and prints
   * each assignment change, every exception poll throws (and keeps polling, as an application
   * that retries would), with the wall clock and the process's CPU time in ms. */
  static void idle(String bootstrap, String group, String topic, String protocol, String instance,
      String more) throws Exception {
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap);
    extra(p);
    p.put("group.id", group);
    p.put("group.protocol", protocol);
    p.put("enable.auto.commit", "false");
    p.put("client.id", group + "-java");
    p.put("key.deserializer", ByteArrayDeserializer.class.getName());
    p.put("value.deserializer", ByteArrayDeserializer.class.getName());
    if (!instance.equals("-")) {
      p.put("group.instance.id", instance);
    }
    if (!more.equals("-")) {
      for (String kv : more.split(",")) {
        String[] pair = kv.split("=", 2);
        p.put(pair[0], pair[1]);
      }
    }
    AtomicBoolean stop = new AtomicBoolean(false);
    stdinWatcher(stop);
    try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
      consumer.subscribe(List.of(topic));
      Set<TopicPartition> last = null;
      while (!stop.get()) {
        try {
          consumer.poll(Duration.ofMillis(100));
        } catch (Exception e) {
          emit("{\"event\":\"error\",\"error\":" + quote(e.getClass().getSimpleName())
              + ",\"t\":" + System.currentTimeMillis() + ",\"cpu_ms\":" + cpuMs() + "}");
          Thread.sleep(100);
          continue;
        }
        Set<TopicPartition> now = new HashSet<>(consumer.assignment());
        if (!now.equals(last)) {
          last = now;
          emit("{\"event\":\"assignment\",\"partitions\":" + partitions(now) + ",\"t\":"
              + System.currentTimeMillis() + ",\"cpu_ms\":" + cpuMs() + "}");
        }
      }
      emit("{\"event\":\"closing\",\"t\":" + System.currentTimeMillis() + ",\"cpu_ms\":"
          + cpuMs() + "}");
    }
    emit("{\"event\":\"closed\",\"t\":" + System.currentTimeMillis() + "}");
  }
}
