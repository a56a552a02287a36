package io.groupcoord.member.example;

import io.groupcoord.member.GroupMember;
import io.groupcoord.member.GroupMemberException;
import io.groupcoord.member.RebalanceListener;
import io.groupcoord.member.TopicPartition;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;

/**
 * Joins a group and prints what happens to it as JSON lines on stdout, one per event:
 *
 * <pre>
 * {"event":"started","member_id":"...","ms":...}
 * {"event":"assigned","partitions":[["orders",0],["orders",3]],"epoch":5,"ms":...}
 * {"event":"revoked"|"lost",...}        {"event":"error","code":111,"message":"...","ms":...}
 * {"event":"left","member_id":"...","ms":...}
 * </pre>
 *
 * ms is the wall clock (epoch milliseconds) when the callback ran. The member leaves the group
 * (close: revoked, then left) when stdin reaches EOF, and the process exits 0.
 *
 * <pre>
 * java -cp ... io.groupcoord.member.example.EventPrinter --bootstrap HOST:PORT[,HOST:PORT]
 *     --group G (--topics T1,T2 | --pattern REGEX) [--instance-id I] [--rack R]
 *     [--rebalance-timeout-ms N] [--callback-delay-ms N]
 * </pre>
 *
 * --callback-delay-ms makes every callback block that long (to exercise slow callbacks).
 */
public final class EventPrinter {
  private static final PrintStream OUT =
      new PrintStream(System.out, true, StandardCharsets.UTF_8);

  public static void main(String[] args) throws IOException {
    GroupMember.Builder builder = GroupMember.builder();
    long[] delayMs = {0};
    for (int i = 0; i < args.length; i++) {
      String value = i + 1 < args.length ? args[i + 1] : null;
      switch (args[i]) {
        case "--bootstrap" -> builder.bootstrap(value);
        case "--group" -> builder.groupId(value);
        case "--topics" -> builder.topics(value.split(","));
        case "--pattern" -> builder.pattern(value);
        case "--instance-id" -> builder.instanceId(value);
        case "--rack" -> builder.rack(value);
        case "--rebalance-timeout-ms" -> builder.rebalanceTimeoutMs(Integer.parseInt(value));
        case "--callback-delay-ms" -> delayMs[0] = Long.parseLong(value);
        default -> usage("unknown argument " + args[i]);
      }
      i++;
    }
    GroupMember[] self = new GroupMember[1];
    builder.listener(
        new RebalanceListener() {
          @Override
          public void onPartitionsAssigned(Set<TopicPartition> partitions) {
            event("assigned", partitions, self[0].memberEpoch(), delayMs[0]);
          }

          @Override
          public void onPartitionsRevoked(Set<TopicPartition> partitions) {
            event("revoked", partitions, self[0].memberEpoch(), delayMs[0]);
          }

          @Override
          public void onPartitionsLost(Set<TopicPartition> partitions) {
            event("lost", partitions, self[0].memberEpoch(), delayMs[0]);
          }
        });
    builder.errorHandler(EventPrinter::error);
    GroupMember member;
    try {
      member = builder.build();
    } catch (IllegalArgumentException e) {
      usage(e.getMessage());
      return;
    }
    self[0] = member;
    line("{\"event\":\"started\",\"member_id\":" + quote(member.memberId()) + ",\"ms\":"
        + System.currentTimeMillis() + "}");
    member.start();
    drain(System.in);
    member.close();
    line("{\"event\":\"left\",\"member_id\":" + quote(member.memberId()) + ",\"ms\":"
        + System.currentTimeMillis() + "}");
  }

  private static void drain(InputStream in) throws IOException {
    byte[] buf = new byte[256];
    while (in.read(buf) >= 0) {
      // only EOF matters
    }
  }

  private static void event(String kind, Set<TopicPartition> partitions, int epoch, long delayMs) {
    List<String> items = new ArrayList<>();
    for (TopicPartition tp : new TreeSet<>(partitions)) {
      items.add("[" + quote(tp.topic()) + "," + tp.partition() + "]");
    }
    line("{\"event\":\"" + kind + "\",\"partitions\":[" + String.join(",", items)
        + "],\"epoch\":" + epoch + ",\"ms\":" + System.currentTimeMillis() + "}");
    if (delayMs > 0) {
      try {
        Thread.sleep(delayMs);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  private static void error(GroupMemberException e) {
    line("{\"event\":\"error\",\"code\":" + e.errorCode() + ",\"message\":"
        + quote(String.valueOf(e.getMessage())) + ",\"ms\":" + System.currentTimeMillis() + "}");
  }

  private static synchronized void line(String json) {
    OUT.println(json);
  }

  private static String quote(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      switch (c) {
        case '"' -> b.append("\\\"");
        case '\\' -> b.append("\\\\");
        default -> {
          if (c < 0x20) {
            b.append(String.format("\\u%04x", (int) c));
          } else {
            b.append(c);
          }
        }
      }
    }
    return b.append('"').toString();
  }

  private static void usage(String why) {
    System.err.println("EventPrinter: " + why);
    System.err.println(
        "usage: EventPrinter --bootstrap HOST:PORT[,...] --group G (--topics T,.. | --pattern RE)"
            + " [--instance-id I] [--rack R] [--rebalance-timeout-ms N] [--callback-delay-ms N]");
    System.exit(2);
  }
}
