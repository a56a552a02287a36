package io.groupcoord.member.example;

import io.groupcoord.member.ClientAssignor;
import io.groupcoord.member.GroupMember;
import io.groupcoord.member.GroupMemberException;
import io.groupcoord.member.RebalanceListener;
import io.groupcoord.member.TopicPartition;
import io.groupcoord.v1.ConsumerGroupHeartbeatRequest;
import io.groupcoord.v1.ConsumerGroupHeartbeatResponse;
import io.groupcoord.v1.TopicPartitions;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Joins a group and prints what happens to it as JSON lines on stdout, one per event, in the
 * format the three member libraries' examples share (docs/member-libraries.md):
 *
 * <pre>
 * {"event":"assigned","partitions":[["orders",0],["orders",3]],"epoch":5,"member_id":"...","ms":...}
 * </pre>
 *
 * event: joined (before the first assignment after each join), assigned, revoked, lost (the
 * callbacks), committed (--commit-offset), error (with code and message), left (after the
 * leave). epoch is the member epoch then, ms the wall clock in milliseconds. The member leaves
 * the group (close: revoked, then left) when stdin reaches EOF (the process exits 0) or on
 * SIGTERM (a shutdown hook; exit status 143).
 *
 * <pre>
 * java -cp ... io.groupcoord.member.example.EventPrinter --bootstrap HOST:PORT[,HOST:PORT]
 *     --group G (--topics T1,T2 | --pattern REGEX) [--instance-id I] [--rack R]
 *     [--rebalance-timeout-ms N] [--revoke-delay-ms N] [--commit-offset BASE]
 *     [--tls-ca PEM [--tls-cert PEM --tls-key PEM] [--tls-server-name NAME]]
 *     [--client-assignor NAME [--assignor-metadata TEXT]] [--print-heartbeats]
 * </pre>
 *
 * --client-assignor NAME declares a client-side round-robin assignor of that name and asks the
 * group for it (the group's partitions dealt to the members sorted by id); with
 * --assignor-metadata TEXT the member declares TEXT as its metadata for it, and the member that
 * computes prints a "computed" line with every member's metadata. --print-heartbeats prints
 * a "heartbeat" line for every heartbeat sent: epoch, owned (the topic_partitions sent,
 * [topic id, partition] pairs; null when not sent), subscription and assignors (whether
 * sent), code (the answer's error code; -1: no answer), assignor_metadata (the metadata a
 * client-side assignor gave the member, as text, when the answer carries it; else null).
 * --revoke-delay-ms makes onPartitionsRevoked block that long after printing its line (a slow
 * revocation: the heartbeats go on meanwhile; past the rebalance timeout, the member is
 * fenced and reports the rest lost once the callback returned).
 * --commit-offset BASE makes onPartitionsRevoked commit BASE + partition for every revoked
 * partition (at the member's epoch, waiting for the result) and read the offsets back with
 * fetch, printed as {"event":"committed","partitions":[...],"errors":[codes],"fetched":[offsets],
 * "epoch":..,"ms":..} after the revoked line (lost partitions are not committed).
 */
public final class EventPrinter {
  private static final PrintStream OUT =
      new PrintStream(System.out, true, StandardCharsets.UTF_8);

  public static void main(String[] args) throws IOException {
    GroupMember.Builder builder = GroupMember.builder();
    long[] delayMs = {0};
    long[] commitBase = {-1};
    String[] tls = new String[4]; // CA, client certificate, key, server name
    String[] assignor = new String[2]; // client-side assignor name, its metadata
    boolean printHeartbeats = false;
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
        case "--revoke-delay-ms" -> delayMs[0] = Long.parseLong(value);
        case "--commit-offset" -> commitBase[0] = Long.parseLong(value);
        case "--client-assignor" -> assignor[0] = value;
        case "--assignor-metadata" -> assignor[1] = value;
        case "--print-heartbeats" -> {
          printHeartbeats = true;
          i--; // (no value)
        }
        case "--tls-ca" -> tls[0] = value;
        case "--tls-cert" -> tls[1] = value;
        case "--tls-key" -> tls[2] = value;
        case "--tls-server-name" -> tls[3] = value;
        default -> usage("unknown argument " + args[i]);
      }
      i++;
    }
    GroupMember[] self = new GroupMember[1];
    if (assignor[0] != null) {
      builder.clientAssignor(roundRobin(assignor[0], assignor[1], self)).serverAssignor(assignor[0]);
    }
    if (printHeartbeats) {
      builder.heartbeatObserver((request, response) -> heartbeat(self[0], request, response));
    }
    if (tls[0] != null || tls[1] != null) {
      builder.tls(file(tls[0]), file(tls[1]), file(tls[2]), tls[3]);
    }
    builder.listener(
        new RebalanceListener() {
          /** false until the first assignment after each (re)join */
          private boolean joined;

          @Override
          public void onPartitionsAssigned(Set<TopicPartition> partitions) {
            if (!joined) {
              joined = true;
              emit(self[0], "joined", Set.of(), "");
            }
            emit(self[0], "assigned", partitions, "");
          }

          @Override
          public void onPartitionsRevoked(Set<TopicPartition> partitions) {
            emit(self[0], "revoked", partitions, "");
            sleep(delayMs[0]);
            if (commitBase[0] >= 0) {
              commitAndFetch(self[0], partitions, commitBase[0]);
            }
          }

          @Override
          public void onPartitionsLost(Set<TopicPartition> partitions) {
            joined = false;
            emit(self[0], "lost", partitions, "");
          }
        });
    builder.errorHandler(e -> error(self[0], e));
    GroupMember member;
    try {
      member = builder.build();
    } catch (IllegalArgumentException e) {
      usage(e.getMessage());
      return;
    }
    self[0] = member;
    AtomicBoolean left = new AtomicBoolean();
    Runnable leave = () -> {
      if (left.compareAndSet(false, true)) {
        member.close();
        emit(member, "left", Set.of(), "");
      }
    };
    Runtime.getRuntime().addShutdownHook(new Thread(leave, "leave-on-sigterm")); // SIGTERM
    member.start();
    drain(System.in);
    leave.run();
  }

  /** Commits base + partition for each partition, then fetches them back; one JSON line. */
  private static void commitAndFetch(GroupMember member, Set<TopicPartition> partitions,
      long base) {
    Map<TopicPartition, Long> offsets = new TreeMap<>();
    for (TopicPartition tp : partitions) {
      offsets.put(tp, base + tp.partition());
    }
    Set<TopicPartition> ok = new TreeSet<>();
    List<String> errors = new ArrayList<>();
    List<String> fetched = new ArrayList<>();
    try {
      Map<TopicPartition, Integer> result = member.commit(offsets).get();
      Map<TopicPartition, Long> read = member.fetch(offsets.keySet()).get();
      for (TopicPartition tp : offsets.keySet()) {
        int code = result.getOrDefault(tp, -1);
        if (code == 0) {
          ok.add(tp);
        } else {
          errors.add("[" + quote(tp.topic()) + "," + tp.partition() + "," + code + "]");
        }
        fetched.add(String.valueOf(read.getOrDefault(tp, -1L)));
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return;
    } catch (ExecutionException e) {
      error(member, e.getCause() instanceof GroupMemberException g
          ? g : new GroupMemberException("commit: " + e.getCause(), e.getCause()));
      return;
    }
    // partitions: committed without error; errors: [topic, partition, code] of the others;
    // fetched: what fetch read back, for every partition in order
    emit(member, "committed", ok, ",\"errors\":[" + String.join(",", errors)
        + "],\"fetched\":[" + String.join(",", fetched) + "]");
  }

  /** --print-heartbeats: one line per heartbeat sent (code -1: the call failed). */
  private static void heartbeat(GroupMember member, ConsumerGroupHeartbeatRequest request,
      ConsumerGroupHeartbeatResponse response) {
    String owned = "null";
    if (request.hasTopicPartitions()) {
      List<String> items = new ArrayList<>();
      for (TopicPartitions tp : request.getTopicPartitions().getTopicPartitionsList()) {
        for (int p : tp.getPartitionsList()) {
          items.add("[" + quote(tp.getTopicId()) + "," + p + "]");
        }
      }
      owned = "[" + String.join(",", items) + "]";
    }
    boolean subscription = request.hasSubscribedTopicNames() || request.hasSubscribedTopicRegex();
    line("{\"event\":\"heartbeat\",\"partitions\":[],\"epoch\":" + request.getMemberEpoch()
        + ",\"member_id\":" + quote(member.memberId()) + ",\"ms\":" + System.currentTimeMillis()
        + ",\"owned\":" + owned + ",\"subscription\":" + subscription
        + ",\"assignors\":" + request.hasClientAssignors()
        + ",\"code\":" + (response == null ? -1 : response.getErrorCode())
        + ",\"assignor_metadata\":" + (response != null && response.hasAssignmentMetadata()
            ? quote(response.getAssignmentMetadata().getMetadataBytes().toStringUtf8()) : "null")
        + "}");
  }

  private static String json(Set<TopicPartition> partitions) {
    List<String> items = new ArrayList<>();
    for (TopicPartition tp : new TreeSet<>(partitions)) {
      items.add("[" + quote(tp.topic()) + "," + tp.partition() + "]");
    }
    return "[" + String.join(",", items) + "]";
  }

  /**
   * A client-side assignor named name: the group's partitions, sorted, dealt to the members
   * sorted by id (partition i to member i mod n) among those subscribed to its topic. Its
   * metadata is the text given (none when null); each time it computes it prints a
   * "computed" line (group_epoch, metadata: member id -> that member's metadata as text)
   * and gives each member the metadata "rank/n" (its place among the members sorted by id).
   */
  static ClientAssignor roundRobin(String name, String metadata, GroupMember[] self) {
    return new ClientAssignor() {
      @Override
      public String name() {
        return name;
      }

      @Override
      public Metadata metadata() {
        return new Metadata(0, metadata == null ? new byte[0]
            : metadata.getBytes(StandardCharsets.UTF_8));
      }

      @Override
      public Map<String, MemberAssignment> assignWithMetadata(GroupSpec group) {
        Map<String, Set<TopicPartition>> partitions = assign(group);
        List<String> ids = new ArrayList<>(partitions.keySet()); // sorted (a TreeMap)
        List<String> seen = new ArrayList<>();
        for (MemberSpec m : group.members()) {
          seen.add(quote(m.memberId()) + ":"
              + quote(new String(m.metadataBytes(), StandardCharsets.UTF_8)));
        }
        emit(self[0], "computed", Set.of(), ",\"group_epoch\":" + group.groupEpoch()
            + ",\"metadata\":{" + String.join(",", seen) + "}");
        Map<String, MemberAssignment> out = new TreeMap<>();
        partitions.forEach((id, ps) -> out.put(id, new MemberAssignment(ps, 0,
            ((ids.indexOf(id)) + "/" + ids.size()).getBytes(StandardCharsets.UTF_8), 0)));
        return out;
      }

      @Override
      public Map<String, Set<TopicPartition>> assign(GroupSpec group) {
        Map<String, Set<TopicPartition>> out = new TreeMap<>();
        List<MemberSpec> members = new ArrayList<>(group.members());
        members.sort(java.util.Comparator.comparing(MemberSpec::memberId));
        members.forEach(m -> out.put(m.memberId(), new TreeSet<>()));
        group.topics().forEach((topic, count) -> {
          List<MemberSpec> subscribed =
              members.stream().filter(m -> m.subscribedTopics().contains(topic)).toList();
          for (int p = 0; p < count && !subscribed.isEmpty(); p++) {
            out.get(subscribed.get(p % subscribed.size()).memberId())
                .add(new TopicPartition(topic, p));
          }
        });
        return out;
      }
    };
  }

  private static File file(String path) {
    return path == null ? null : new File(path);
  }

  private static void drain(InputStream in) throws IOException {
    byte[] buf = new byte[256];
    while (in.read(buf) >= 0) {
      // only EOF matters
    }
  }

  /** One line: the shared fields, then extra (",\"name\":value..." or ""). */
  private static void emit(GroupMember member, String kind, Set<TopicPartition> partitions,
      String extra) {
    line("{\"event\":\"" + kind + "\",\"partitions\":" + json(partitions) + ",\"epoch\":"
        + member.memberEpoch() + ",\"member_id\":" + quote(member.memberId()) + ",\"ms\":"
        + System.currentTimeMillis() + extra + "}");
  }

  private static void sleep(long ms) {
    if (ms > 0) {
      try {
        Thread.sleep(ms);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  private static void error(GroupMember member, GroupMemberException e) {
    emit(member, "error", Set.of(), ",\"code\":" + e.errorCode() + ",\"message\":"
        + quote(String.valueOf(e.getMessage())));
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
            + " [--instance-id I] [--rack R] [--rebalance-timeout-ms N] [--revoke-delay-ms N]"
            + " [--commit-offset BASE] [--tls-ca PEM [--tls-cert PEM --tls-key PEM]"
            + " [--tls-server-name NAME]] [--client-assignor NAME [--assignor-metadata TEXT]]"
            + " [--print-heartbeats]");
    System.exit(2);
  }
}
