// A transactional producer that commits a group's offsets in two transactions, the first
// committed, the second aborted (tests/interop/test_txn_markers.py). Args: bootstrap,
// transactional id, group, topic. After sendOffsetsToTransaction of each it prints
// {"sent": <offset>} and waits for one line on stdin before ending the transaction, so the
// test can read the floor and DescribeTransactions inside the transaction.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TxnOffsets {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("transactional.id", args[1]);
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            long[] offsets = {10, 20};
            for (int i = 0; i < 2; i++) {
                producer.beginTransaction();
                producer.send(new ProducerRecord<>(args[3], "k".getBytes(), "v".getBytes())).get();
                producer.sendOffsetsToTransaction(
                    Map.of(new TopicPartition(args[3], 0), new OffsetAndMetadata(offsets[i])),
                    new ConsumerGroupMetadata(args[2]));
                System.out.println("{\"sent\": " + offsets[i] + "}");
                System.out.flush();
                in.readLine();
                if (i == 0) {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
            }
        }
        System.out.println("{\"done\": true}");
    }
}
