// A transactional consume-transform-produce loop (docs/exactly-once.md, "Tested with real
// applications"): Kafka's own consumer and producer (kafka-clients 4.4.0), as an application
// that processes exactly once would be written. Args:
//   bootstrap group input output transactionalId abortEvery maxPollRecords stopAfter maxSeconds
//   [groupProtocol]
// It reads `input` with `group` (read_committed, no auto commit), writes one record per input
// record to `output` (key "<topic>-<partition>-<offset>", value the input's value), sends the
// consumed positions with sendOffsetsToTransaction(offsets, consumer.groupMetadata()) and
// commits; every `abortEvery`-th transaction (0: never) is aborted instead, and the consumer
// is rewound to the start of the aborted batch. An abortable error aborts too and rewinds to
// the committed offsets. It stops after `stopAfter` records committed in this run (0: never),
// after `maxSeconds`, or when stdin closes. One JSON object per line on stdout:
//   {"event":"ready"}, {"event":"assigned","partitions":[...]},
//   {"event":"committed","txn":n,"records":k,"total":t,"ms":commitMs},
//   {"event":"aborted","txn":n,"records":k,"why":"planned"|error},
//   {"event":"summary","committed":c,"aborted":a,"records":t,"seconds":s,"p50_ms":m,
//    "offsets_p50_ms":o}   (medians of commitTransaction and sendOffsetsToTransaction)
import java.io.InputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class EosLoop {
    static volatile boolean stop = false;

    static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], group = args[1], input = args[2], output = args[3];
        String tid = args[4];
        int abortEvery = Integer.parseInt(args[5]);
        int maxPoll = Integer.parseInt(args[6]);
        long stopAfter = Long.parseLong(args[7]);
        long deadline = System.nanoTime() + (long) (Double.parseDouble(args[8]) * 1e9);
        String protocol = args.length > 9 ? args[9] : "classic";

        Thread stdin = new Thread(() -> {
            try {
                InputStream in = System.in;
                while (in.read() >= 0) { }
            } catch (Exception e) { }
            stop = true;
        });
        stdin.setDaemon(true);
        stdin.start();

        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("group.protocol", protocol);
        c.put("enable.auto.commit", "false");
        c.put("isolation.level", "read_committed");
        c.put("auto.offset.reset", "earliest");
        c.put("max.poll.records", String.valueOf(maxPoll));
        c.put("key.deserializer", ByteArrayDeserializer.class.getName());
        c.put("value.deserializer", ByteArrayDeserializer.class.getName());
        if (protocol.equals("classic")) {
            // a restarted instance takes its predecessor's place at once (no session timeout)
            c.put("group.instance.id", tid);
            c.put("session.timeout.ms", "6000");
            c.put("heartbeat.interval.ms", "500");
        }
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", tid);
        p.put("transaction.timeout.ms", "20000");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());

        long committed = 0, aborted = 0, records = 0;
        List<Double> commitMs = new ArrayList<>();
        List<Double> offsetsMs = new ArrayList<>();
        long started = 0, last = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c);
             KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            emit("{\"event\":\"ready\"}");
            consumer.subscribe(List.of(input), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> parts) { }
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    StringBuilder b = new StringBuilder();
                    for (TopicPartition tp : parts) {
                        if (b.length() > 0) b.append(',');
                        b.append(tp.partition());
                    }
                    emit("{\"event\":\"assigned\",\"partitions\":[" + b + "]}");
                }
            });
            long txn = 0;
            while (!stop && System.nanoTime() < deadline && (stopAfter <= 0 || records < stopAfter)) {
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(100));
                if (batch.isEmpty()) continue;
                if (started == 0) started = System.nanoTime();
                txn++;
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                Map<TopicPartition, Long> firsts = new HashMap<>();
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    firsts.putIfAbsent(tp, r.offset());
                    offsets.put(tp, new OffsetAndMetadata(r.offset() + 1));
                }
                boolean planned = abortEvery > 0 && txn % abortEvery == 0;
                try {
                    producer.beginTransaction();
                    for (ConsumerRecord<byte[], byte[]> r : batch) {
                        String key = r.topic() + "-" + r.partition() + "-" + r.offset();
                        producer.send(new ProducerRecord<>(output, key.getBytes(), r.value()));
                    }
                    long s0 = System.nanoTime();
                    producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                    offsetsMs.add((System.nanoTime() - s0) / 1e6);
                    if (planned) {
                        producer.abortTransaction();
                        aborted++;
                        for (Map.Entry<TopicPartition, Long> e : firsts.entrySet()) {
                            consumer.seek(e.getKey(), e.getValue());
                        }
                        emit("{\"event\":\"aborted\",\"txn\":" + txn + ",\"records\":" + batch.count()
                            + ",\"why\":\"planned\"}");
                        continue;
                    }
                    long t0 = System.nanoTime();
                    producer.commitTransaction();
                    double ms = (System.nanoTime() - t0) / 1e6;
                    commitMs.add(ms);
                    committed++;
                    records += batch.count();
                    last = System.nanoTime();
                    emit("{\"event\":\"committed\",\"txn\":" + txn + ",\"records\":" + batch.count()
                        + ",\"total\":" + records + ",\"ms\":" + ms + "}");
                } catch (ProducerFencedException | InvalidProducerEpochException
                         | OutOfOrderSequenceException | AuthorizationException e) {
                    emit("{\"event\":\"fatal\",\"error\":" + quote(e.toString()) + "}");
                    throw e;
                } catch (KafkaException e) {
                    // abortable (e.g. the group coordinator moved, a rebalance fenced us): abort
                    // and carry on from the committed offsets
                    producer.abortTransaction();
                    aborted++;
                    emit("{\"event\":\"aborted\",\"txn\":" + txn + ",\"records\":" + batch.count()
                        + ",\"why\":" + quote(e.toString()) + "}");
                    Set<TopicPartition> assigned = consumer.assignment();
                    Map<TopicPartition, OffsetAndMetadata> positions =
                        consumer.committed(assigned, Duration.ofSeconds(30));
                    for (TopicPartition tp : assigned) {
                        OffsetAndMetadata om = positions.get(tp);
                        if (om != null) {
                            consumer.seek(tp, om.offset());
                        } else {
                            consumer.seekToBeginning(Collections.singleton(tp));
                        }
                    }
                }
            }
        }
        double seconds = last == 0 ? 0 : (last - started) / 1e9;
        Collections.sort(commitMs);
        Collections.sort(offsetsMs);
        double p50 = commitMs.isEmpty() ? 0 : commitMs.get(commitMs.size() / 2);
        double offsetsP50 = offsetsMs.isEmpty() ? 0 : offsetsMs.get(offsetsMs.size() / 2);
        emit("{\"event\":\"summary\",\"committed\":" + committed + ",\"aborted\":" + aborted
            + ",\"records\":" + records + ",\"seconds\":" + seconds + ",\"p50_ms\":" + p50
            + ",\"offsets_p50_ms\":" + offsetsP50 + "}");
    }
}
