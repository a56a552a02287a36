// A stateful Kafka Streams application run with group.protocol=streams (KIP-1071)
// (tests/interop/test_streams_group_protocol.py): input records (key k<i>, value "<i>") are
// re-keyed by i % 10 (a repartition topic), counted per key in a state store (a changelog
// topic) and the counts written to the output topic. Both internal topics are the streams
// group coordinator's to create.
//
// Args: bootstrap, application id, input topic, output topic, state directory, optionally
// "eos" (processing.guarantee=exactly_once_v2). The system property instance.id makes the
// instance a static member (group.instance.id), application.server gives it an
// interactive-query endpoint (host:port; nothing listens there), threads its stream threads
// (num.stream.threads, 1 by default: each thread is a member of the group).
// An input value "shutdown" fails the instance that processes it with a request to shut the
// whole application down (SHUTDOWN_APPLICATION from the uncaught exception handler; any
// other uncaught exception shuts the instance down alone).
// Prints one JSON object per line: {"state": "<state>"} on each state change and
// {"error": "..."} on an uncaught exception; a line "tasks" on stdin prints the instance's own
// view, {"tasks": ["<subtopology>_<partition>", ...], "standby": [...], "now": "<state>"}
// (its active and standby tasks); a line "hosts" prints what it knows of every instance's
// endpoint, {"hosts": [{"host": "<host:port>", "active": ["<topic>-<partition>", ...],
// "standby": [...]}, ...]} (metadataForAllStreamsClients);
// a line "remain" makes the close keep the member in the group (a static member's temporary
// leave, CloseOptions REMAIN_IN_GROUP); at the end of stdin it closes cleanly.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

public class StreamsProtocolCount {
    static final String SHUTDOWN = "the test asked for an application shutdown";

    static String partitions(java.util.Set<org.apache.kafka.common.TopicPartition> partitions) {
        StringBuilder out = new StringBuilder();
        for (org.apache.kafka.common.TopicPartition tp : partitions) {
            out.append(out.length() == 0 ? "" : ", ").append('"').append(tp).append('"');
        }
        return "[" + out + "]";
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String applicationId = args[1];
        String input = args[2];
        String output = args[3];
        String stateDir = args[4];

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "streams");
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG,
            Integer.parseInt(System.getProperty("threads", "1")));
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        String instanceId = System.getProperty("instance.id");
        if (instanceId != null) {
            props.put(StreamsConfig.consumerPrefix(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG), instanceId);
        }
        String endpoint = System.getProperty("application.server");
        if (endpoint != null) {
            props.put(StreamsConfig.APPLICATION_SERVER_CONFIG, endpoint);
        }
        if (args.length > 5 && args[5].equals("eos")) {
            props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        }

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .groupBy((k, v) -> {
                    if (v.equals("shutdown")) {
                        throw new IllegalStateException(SHUTDOWN);
                    }
                    return "g" + (Integer.parseInt(v) % 10);
                },
                Grouped.with("by-mod", Serdes.String(), Serdes.String()))
            .count(Materialized.as("counts"))
            .toStream()
            .mapValues(Object::toString)
            .to(output, Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setStateListener((now, before) ->
            System.out.println("{\"state\": \"" + now + "\"}"));
        streams.setUncaughtExceptionHandler(e -> {
            String text = String.valueOf(e).replace("\\", "\\\\").replace("\"", "'");
            System.out.println("{\"error\": \"" + text + "\"}");
            boolean shutdown = false;
            for (Throwable c = e; c != null; c = c.getCause()) {
                shutdown |= String.valueOf(c.getMessage()).contains(SHUTDOWN);
            }
            if (shutdown) {
                return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_APPLICATION;
            }
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in));
        String line;
        boolean remain = false;
        while ((line = stdin.readLine()) != null) {
            if (line.equals("remain")) {
                remain = true;
            }
            // the end of stdin closes the application
            if (line.equals("tasks")) {
                StringBuilder tasks = new StringBuilder();
                StringBuilder standby = new StringBuilder();
                for (org.apache.kafka.streams.ThreadMetadata t : streams.metadataForLocalThreads()) {
                    for (org.apache.kafka.streams.TaskMetadata task : t.activeTasks()) {
                        tasks.append(tasks.length() == 0 ? "" : ", ")
                            .append('"').append(task.taskId()).append('"');
                    }
                    for (org.apache.kafka.streams.TaskMetadata task : t.standbyTasks()) {
                        standby.append(standby.length() == 0 ? "" : ", ")
                            .append('"').append(task.taskId()).append('"');
                    }
                }
                System.out.println("{\"tasks\": [" + tasks + "], \"standby\": [" + standby
                    + "], \"now\": \"" + streams.state() + "\"}");
            }
            if (line.equals("hosts")) {
                StringBuilder hosts = new StringBuilder();
                for (org.apache.kafka.streams.StreamsMetadata m : streams.metadataForAllStreamsClients()) {
                    hosts.append(hosts.length() == 0 ? "" : ", ")
                        .append("{\"host\": \"").append(m.host()).append(':').append(m.port())
                        .append("\", \"active\": ").append(partitions(m.topicPartitions()))
                        .append(", \"standby\": ").append(partitions(m.standbyTopicPartitions()))
                        .append('}');
                }
                System.out.println("{\"hosts\": [" + hosts + "]}");
            }
        }
        CloseOptions close = CloseOptions.timeout(java.time.Duration.ofSeconds(20));
        if (remain) {
            close = close.withGroupMembershipOperation(
                CloseOptions.GroupMembershipOperation.REMAIN_IN_GROUP);
        }
        streams.close(close);
        System.out.println("{\"state\": \"CLOSED\"}");
    }
}
