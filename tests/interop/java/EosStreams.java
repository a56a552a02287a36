// A Kafka Streams application with processing.guarantee=exactly_once_v2
// (tests/interop/test_streams_exactly_once.py): input topic -> mapValues -> output topic, a
// stateless topology. Each output value is "out-" + the input value, keyed as the input, so
// that a checker can tell every input record's result.
//
// Args: bootstrap, application id, input topic, output topic, state directory, milliseconds
// to sleep per record (to keep the application busy while the test kills it), then options:
// "repartition": the records pass through a repartition topic first (an internal topic Kafka
// Streams creates, and a second sub-topology whose offsets commit in the same transactions);
// "instance-id=ID": static membership (the consumer's group.instance.id), so that a
// restarted instance takes the killed one's place in the group without waiting for its
// session to time out.
//
// Prints one JSON object per line: {"state": "<state>"} on each state change,
// {"processed": n} every 50 records, and around each transaction's commit (the n-th
// transaction of the producer): {"offsets_sent": n} once sendOffsetsToTransaction has
// returned (TxnOffsetCommit answered) and {"committing": n} just before commitTransaction
// (EndTxn). Reads lines on stdin: "hold" makes the producer wait in the next
// commitTransaction of a transaction whose offsets were sent, before its EndTxn, until
// "release" (or 60 s), printing {"held": n} -- so that the test can kill a process while that
// transaction's offsets are pending; at the end of stdin the application closes cleanly.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaClientSupplier;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.processor.internals.DefaultKafkaClientSupplier;

public class EosStreams {
    static final AtomicBoolean HOLD = new AtomicBoolean();

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String applicationId = args[1];
        String input = args[2];
        String output = args[3];
        String stateDir = args[4];
        long sleepMs = Long.parseLong(args[5]);
        boolean repartition = false;
        String instanceId = null;
        for (int i = 6; i < args.length; i++) {
            if (args[i].equals("repartition")) {
                repartition = true;
            } else if (args[i].startsWith("instance-id=")) {
                instanceId = args[i].substring("instance-id=".length());
            } else {
                throw new IllegalArgumentException(args[i]);
            }
        }

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        // a killed instance's member leaves the (classic) group after this, and its open
        // transaction is aborted by the upstream after transaction.timeout.ms
        props.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 6000);
        props.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 1000);
        props.put(StreamsConfig.producerPrefix("transaction.timeout.ms"), 5000);
        if (instanceId != null) {
            props.put(StreamsConfig.consumerPrefix("group.instance.id"), instanceId);
        }

        StreamsBuilder builder = new StreamsBuilder();
        AtomicLong processed = new AtomicLong();
        KStream<String, String> source =
            builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()));
        if (repartition) {
            source = source.repartition(
                Repartitioned.with(Serdes.String(), Serdes.String()).withName("mid"));
        }
        source
            .mapValues(value -> {
                if (sleepMs > 0) {
                    pause(sleepMs);
                }
                long n = processed.incrementAndGet();
                if (n % 50 == 0) {
                    emit("{\"processed\": " + n + "}");
                }
                return "out-" + value;
            })
            .to(output, Produced.with(Serdes.String(), Serdes.String()));

        KafkaClientSupplier clients = new DefaultKafkaClientSupplier() {
            @Override
            public Producer<byte[], byte[]> getProducer(Map<String, Object> config) {
                return new HoldingProducer(config);
            }
        };
        KafkaStreams streams = new KafkaStreams(builder.build(), props, clients);
        streams.setStateListener((now, before) -> emit("{\"state\": \"" + now + "\"}"));
        streams.setUncaughtExceptionHandler(e -> {
            emit("{\"error\": \"" + String.valueOf(e).replace('"', '\'').replace('\n', ' ') + "\"}");
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.equals("hold")) {
                HOLD.set(true);
            } else if (line.equals("release")) {
                HOLD.set(false);
            }
        }
        HOLD.set(false);
        streams.close();
        emit("{\"closed\": true}");
    }

    /** Kafka's producer, announcing each transaction's offsets and commit; it can be held
     * between the two (see the header). */
    static final class HoldingProducer extends KafkaProducer<byte[], byte[]> {
        private final AtomicLong transactions = new AtomicLong();
        private volatile boolean offsetsSent;

        HoldingProducer(Map<String, Object> config) {
            super(config, new ByteArraySerializer(), new ByteArraySerializer());
        }

        @Override
        public void sendOffsetsToTransaction(
            Map<TopicPartition, OffsetAndMetadata> offsets, ConsumerGroupMetadata group) {
            super.sendOffsetsToTransaction(offsets, group);
            offsetsSent = true;
            emit("{\"offsets_sent\": " + transactions.incrementAndGet() + "}");
        }

        @Override
        public void commitTransaction() {
            if (offsetsSent && HOLD.get()) {
                emit("{\"held\": " + transactions.get() + "}");
                long deadline = System.currentTimeMillis() + 60_000;
                while (HOLD.get() && System.currentTimeMillis() < deadline) {
                    pause(5);
                }
            }
            offsetsSent = false;
            emit("{\"committing\": " + transactions.get() + "}");
            super.commitTransaction();
        }

        @Override
        public void abortTransaction() {
            offsetsSent = false;
            super.abortTransaction();
        }
    }

    private static void pause(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
