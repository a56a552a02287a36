package io.groupcoord.member;

import io.groupcoord.v1.ClientAssignorList;
import io.groupcoord.v1.ConsumerGroupDescribeRequest;
import io.groupcoord.v1.ConsumerGroupDescribedGroup;
import io.groupcoord.v1.ConsumerGroupHeartbeatRequest;
import io.groupcoord.v1.ConsumerGroupHeartbeatResponse;
import io.groupcoord.v1.ConsumerGroupInstallAssignmentRequest;
import io.groupcoord.v1.ConsumerGroupInstallAssignmentResponse;
import io.groupcoord.v1.ConsumerGroupPrepareAssignmentRequest;
import io.groupcoord.v1.ConsumerGroupPrepareAssignmentResponse;
import io.groupcoord.v1.DescribeTopicsRequest;
import io.groupcoord.v1.DescribedTopic;
import io.groupcoord.v1.GroupCoordinatorGrpc;
import io.groupcoord.v1.GroupCoordinatorGrpc.GroupCoordinatorBlockingStub;
import io.groupcoord.v1.InstalledMember;
import io.groupcoord.v1.OffsetCommitRequest;
import io.groupcoord.v1.OffsetCommitRequestPartition;
import io.groupcoord.v1.OffsetCommitRequestTopic;
import io.groupcoord.v1.OffsetCommitResponse;
import io.groupcoord.v1.OffsetCommitResponsePartition;
import io.groupcoord.v1.OffsetCommitResponseTopic;
import io.groupcoord.v1.OffsetFetchRequest;
import io.groupcoord.v1.OffsetFetchRequestGroup;
import io.groupcoord.v1.OffsetFetchRequestTopics;
import io.groupcoord.v1.OffsetFetchRequestTopicsList;
import io.groupcoord.v1.OffsetFetchResponseGroup;
import io.groupcoord.v1.OffsetFetchResponsePartitions;
import io.groupcoord.v1.OffsetFetchResponseTopics;
import io.groupcoord.v1.PreparedMember;
import io.groupcoord.v1.PreparedTopic;
import io.groupcoord.v1.StringList;
import io.groupcoord.v1.TopicCatalogGrpc;
import io.groupcoord.v1.TopicPartitions;
import io.groupcoord.v1.TopicPartitionsList;
import com.google.protobuf.ByteString;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.File;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.BiConsumer;
import java.util.function.Consumer;
import java.util.function.Function;
import java.util.function.ToIntFunction;

/**
 * A KIP-848 consumer-group member over groupcoord's gRPC API: it joins the group with a
 * ConsumerGroupHeartbeat, heartbeats at the interval the coordinator asks for, reconciles the
 * assignment it is given (revoking before assigning) through a {@link RebalanceListener},
 * rejoins when fenced, follows the group to another shard, commits and fetches offsets, and
 * leaves on {@link #close()}.
 *
 * <pre>{@code
 * try (GroupMember member = GroupMember.builder()
 *     .bootstrap("127.0.0.1:50051").groupId("orders").topics("orders")
 *     .listener(myListener).build().start()) {
 *   ...
 *   member.commit(Map.of(new TopicPartition("orders", 0), 42L)).get();
 * }
 * }</pre>
 *
 * <p>Threads: each member has a heartbeat thread ({@code groupcoord-member-<group>}) that
 * runs the protocol, and a callback thread ({@code groupcoord-member-callbacks-<group>}) that
 * runs the listener's callbacks one at a time, in order; heartbeats go on while a callback
 * runs. A client-side assignor's {@code assign}, {@link #commit}, {@link #fetch} and {@link
 * #describe} run on a small pool of their own ({@code groupcoord-member-call-<group>}).
 */
public final class GroupMember implements AutoCloseable {
  static final long RPC_TIMEOUT_MS = 10_000;
  /** How long commit/fetch/describe keep re-routing before they fail. */
  static final long CALL_DEADLINE_MS = 30_000;
  private static final System.Logger LOG = System.getLogger(GroupMember.class.getName());

  private final String groupId;
  private final List<String> topics;
  private final String pattern;
  private final String rackId;
  private final String instanceId;
  private final String serverAssignor;
  private final ClientAssignor clientAssignor;
  private final int rebalanceTimeoutMs;
  private final RebalanceListener listener;
  private final Consumer<GroupMemberException> errorHandler;
  private final BiConsumer<ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse>
      heartbeatObserver;
  private final Router router;
  private final String memberId = newMemberId();
  private final ExecutorService calls;
  /** The listener's callbacks, one at a time, in order (reconciliation, loss, close). */
  private final ExecutorService callbacks;
  private volatile Thread callbackThread;
  private final Thread loop;
  private final AtomicBoolean computing = new AtomicBoolean();

  private final Object lock = new Object();
  private boolean closing;
  private boolean wake;
  private boolean started;
  private volatile boolean closed;
  /** Heartbeats answered without error so far (commit waits for the next on a stale epoch). */
  private long heartbeats;

  private volatile int epoch;
  private volatile int heartbeatIntervalMs = 5_000;
  private volatile Set<TopicPartition> assignment = Set.of();
  private volatile ClientAssignor.AssignmentMetadata assignmentMetadata;

  // shared between the heartbeat and the callback thread: guarded by lock
  /** What the member owns (as its callbacks said), by topic id. */
  private final Set<IdPartition> owned = new HashSet<>();
  /** Bumped at each change of owned; acked: the version a successful heartbeat reported. */
  private long ownedVersion;
  private long ackedVersion;
  /** The target the coordinator last gave and the member has not reached yet, or null. */
  private Set<IdPartition> target;
  /** A reconciliation is queued or running on the callback thread. */
  private boolean reconciling;
  /** Bumped when the member is fenced: a reconciliation of an older one stops. */
  private int generation;

  // heartbeat-thread state
  /** The owned set the last successful heartbeat reported (null: report it next time). */
  private Set<IdPartition> reported;
  /** The assignor declaration the coordinator has (null: declare it next time). */
  private ClientAssignorList declared;
  /** Send the full request next (after joining, an error, a re-route). */
  private boolean full = true;

  /** topic id -> name (refreshed from the topic catalog on a miss). */
  private final Map<String, String> topicNames = new ConcurrentHashMap<>();

  private record IdPartition(String topicId, int partition) {}

  private GroupMember(Builder b) {
    this.groupId = b.groupId;
    this.topics = b.topics;
    this.pattern = b.pattern;
    this.rackId = b.rackId;
    this.instanceId = b.instanceId;
    this.serverAssignor = b.serverAssignor;
    this.clientAssignor = b.clientAssignor;
    this.rebalanceTimeoutMs = b.rebalanceTimeoutMs;
    this.listener = b.listener;
    this.errorHandler = b.errorHandler;
    this.heartbeatObserver = b.heartbeatObserver;
    this.router = new Router(b.bootstrap, groupId, b.tls);
    this.calls =
        Executors.newCachedThreadPool(
            r -> {
              Thread t = new Thread(r, "groupcoord-member-call-" + groupId);
              t.setDaemon(true);
              return t;
            });
    this.callbacks =
        Executors.newSingleThreadExecutor(
            r -> {
              Thread t = new Thread(r, "groupcoord-member-callbacks-" + groupId);
              t.setDaemon(true);
              callbackThread = t;
              return t;
            });
    this.loop = new Thread(this::run, "groupcoord-member-" + groupId);
    this.loop.setDaemon(true);
  }

  public static Builder builder() {
    return new Builder();
  }

  /** Starts heartbeating (joins the group); returns this member. */
  public GroupMember start() {
    synchronized (lock) {
      if (started) {
        throw new IllegalStateException("already started");
      }
      started = true;
    }
    loop.start();
    return this;
  }

  /** The member id (generated here, kept for the member's lifetime, fencing included). */
  public String memberId() {
    return memberId;
  }

  /** The member epoch: 0 before joining and after being fenced. */
  public int memberEpoch() {
    return epoch;
  }

  /** The partitions the member owns now (as its callbacks said). */
  public Set<TopicPartition> assignment() {
    return assignment;
  }

  /**
   * What the group's client-side assignor gave this member with its latest assignment (its
   * metadata version and bytes, and KIP-848's per-member error), or null: none yet, or the
   * group's assignor is a server-side one.
   */
  public ClientAssignor.AssignmentMetadata assignmentMetadata() {
    return assignmentMetadata;
  }

  public String groupId() {
    return groupId;
  }

  // ---- the heartbeat loop ---------------------------------------------------------------

  private void run() {
    Backoff backoff = new Backoff();
    long delay = 0;
    while (sleep(delay)) {
      delay = step(backoff);
    }
    // closing: a running reconciliation finishes, then onPartitionsRevoked(everything) runs
    // on the callback thread while the heartbeats go on; then the leave
    Future<?> revoked = onCallbackThread(this::revokeAll);
    while (revoked != null && !revoked.isDone() && epoch > 0) {
      long next = step(backoff);
      try {
        revoked.get(Math.max(1, next), TimeUnit.MILLISECONDS);
      } catch (TimeoutException e) {
        // heartbeat again
      } catch (InterruptedException e) {
        break;
      } catch (ExecutionException e) {
        break; // (callback() reports a listener's failure itself)
      }
    }
    await(revoked);
    leave();
    if (closed) {
      release(); // (again, when close() waited for this thread: idempotent)
    }
  }

  /** Waits up to ms (0: not at all) or until woken; false once the member is closing. */
  private boolean sleep(long ms) {
    synchronized (lock) {
      long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
      while (!closing && !wake) {
        long left = TimeUnit.NANOSECONDS.toMillis(end - System.nanoTime());
        if (left <= 0) {
          break;
        }
        try {
          lock.wait(left);
        } catch (InterruptedException e) {
          closing = true;
        }
      }
      wake = false;
      return !closing;
    }
  }

  private void wakeLocked() {
    wake = true;
    lock.notifyAll();
  }

  /** One heartbeat; the delay to the next. */
  private long step(Backoff backoff) {
    int sentEpoch;
    Set<IdPartition> ownedNow;
    long version;
    synchronized (lock) {
      sentEpoch = epoch;
      ownedNow = Set.copyOf(owned);
      version = ownedVersion;
    }
    ConsumerGroupHeartbeatRequest request = heartbeatRequest(sentEpoch, ownedNow);
    ConsumerGroupHeartbeatResponse r = null;
    try {
      r = stub(router.coordinator()).consumerGroupHeartbeat(request);
    } catch (StatusRuntimeException e) {
      router.forget();
      full = true;
      if (!transient_(e)) {
        report(new GroupMemberException("ConsumerGroupHeartbeat: " + e.getStatus(), e));
      }
      return backoff.next();
    } catch (GroupMemberException e) {
      router.forget();
      full = true;
      return backoff.next();
    } finally {
      observe(request, r);
    }
    int code = r.getErrorCode();
    if (code == Errors.NONE) {
      backoff.reset();
      full = false;
      if (request.hasTopicPartitions()) {
        reported = ownedNow;
      }
      if (request.hasClientAssignors()) {
        declared = request.getClientAssignors();
      }
      heartbeatIntervalMs = r.getHeartbeatIntervalMs();
      synchronized (lock) {
        epoch = r.getMemberEpoch();
        heartbeats++;
        if (request.hasTopicPartitions()) {
          ackedVersion = Math.max(ackedVersion, version);
        }
        if (r.hasAssignment()) {
          target = fromProto(r.getAssignment());
          assignmentMetadata = r.hasAssignmentMetadata()
              ? new ClientAssignor.AssignmentMetadata(
                  r.getAssignmentMetadata().getMetadataVersion(),
                  r.getAssignmentMetadata().getMetadataBytes().toByteArray(),
                  r.getAssignmentMetadata().getError())
              : null;
        }
        if (target != null && !reconciling && !closing) {
          reconciling = true;
          int gen = generation;
          if (onCallbackThread(() -> reconcileGuarded(gen)) == null) {
            reconciling = false;
          }
        }
        lock.notifyAll();
      }
      if (r.getShouldComputeAssignment() && clientAssignor != null && !closing
          && computing.compareAndSet(false, true)) {
        try {
          calls.execute(this::computeAssignmentAside);
        } catch (RejectedExecutionException e) {
          computing.set(false);
        }
      }
      return heartbeatIntervalMs;
    }
    String why = "ConsumerGroupHeartbeat: error " + code + " " + r.getErrorMessage();
    if (Errors.fenced(code)) {
      fenced();
      // a fenced join (epoch 0 already) is not retried in a tight loop
      return sentEpoch == 0 ? backoff.next() : 0;
    }
    full = true;
    if (Errors.reroute(code)) {
      router.forget();
      return backoff.next();
    }
    report(new GroupMemberException(code, why));
    if (code == Errors.FENCED_INSTANCE_ID && sentEpoch != 0) {
      fenced(); // another process took the instance id over: what it owned is lost
    } else if (Errors.staticConflict(code)) {
      synchronized (lock) {
        epoch = 0;
      }
    }
    return backoff.next();
  }

  private void observe(ConsumerGroupHeartbeatRequest request,
      ConsumerGroupHeartbeatResponse response) {
    if (heartbeatObserver != null) {
      try {
        heartbeatObserver.accept(request, response);
      } catch (RuntimeException e) {
        LOG.log(System.Logger.Level.WARNING, "heartbeat observer threw: {0}", e.toString());
      }
    }
  }

  /**
   * The heartbeat: on joining (epoch 0), after an error or a re-route, the full request;
   * otherwise only what changed -- the owned partitions when they differ from what the
   * coordinator was last told, the assignor declaration when its metadata changed.
   */
  private ConsumerGroupHeartbeatRequest heartbeatRequest(int sentEpoch, Set<IdPartition> ownedNow) {
    ConsumerGroupHeartbeatRequest.Builder b =
        ConsumerGroupHeartbeatRequest.newBuilder()
            .setGroupId(groupId)
            .setMemberId(memberId)
            .setMemberEpoch(sentEpoch);
    if (instanceId != null) {
      b.setInstanceId(instanceId);
    }
    boolean whole = full || sentEpoch == 0;
    if (whole) {
      b.setRebalanceTimeoutMs(rebalanceTimeoutMs);
      if (pattern != null) {
        b.setSubscribedTopicRegex(pattern);
      } else {
        b.setSubscribedTopicNames(StringList.newBuilder().addAllValues(topics));
      }
      if (rackId != null) {
        b.setRackId(rackId);
      }
      if (serverAssignor != null) {
        b.setServerAssignor(serverAssignor);
      }
    }
    ClientAssignorList assignors = declaration();
    if (whole || !assignors.equals(declared)) {
      b.setClientAssignors(assignors);
    }
    if (whole || !ownedNow.equals(reported)) {
      b.setTopicPartitions(toProto(ownedNow));
    }
    return b.build();
  }

  private ClientAssignorList declaration() {
    ClientAssignorList.Builder assignors = ClientAssignorList.newBuilder();
    if (clientAssignor != null) {
      ClientAssignor.Metadata meta = clientAssignor.metadata();
      assignors.addAssignors(
          io.groupcoord.v1.ClientAssignor.newBuilder()
              .setName(clientAssignor.name())
              .setMinimumVersion(clientAssignor.minimumVersion())
              .setMaximumVersion(clientAssignor.maximumVersion())
              .setReason(clientAssignor.reason())
              .setMetadataVersion(meta.version())
              .setMetadataBytes(ByteString.copyFrom(meta.bytes())));
    }
    return assignors.build();
  }

  /** Runs task on the callback thread (null when the member is shut down). */
  private Future<?> onCallbackThread(Runnable task) {
    try {
      return callbacks.submit(task);
    } catch (RejectedExecutionException e) {
      return null;
    }
  }

  /** Waits for a callback-thread task (the listener's callbacks are let finish). */
  private void await(Future<?> f) {
    if (f == null || Thread.currentThread() == callbackThread) {
      return;
    }
    try {
      f.get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (ExecutionException | java.util.concurrent.CancellationException e) {
      // callback() reports the listener's failures
    }
  }

  /**
   * On the callback thread: brings what the member owns to the latest target, revoking
   * before assigning. While onPartitionsRevoked runs the heartbeats still report the old
   * owned set; once it returns, owned - revoked is reported at once (and its answer awaited,
   * within max(5 s, 2 intervals)) before onPartitionsAssigned is called with what is new.
   * A target naming an unknown topic id waits for the next heartbeat. Stops when the member
   * is fenced (gen moved) or closing.
   */
  private void reconcileGuarded(int gen) {
    boolean done = false;
    try {
      reconcile(gen);
      done = true;
    } finally {
      if (!done) { // a listener threw an Error: the next heartbeat starts over
        synchronized (lock) {
          if (generation == gen) {
            reconciling = false;
          }
        }
      }
    }
  }

  private void reconcile(int gen) {
    while (true) {
      Set<IdPartition> tgt;
      Set<IdPartition> own;
      synchronized (lock) {
        if (generation != gen || closing || target == null) {
          if (generation == gen) {
            reconciling = false;
          }
          return;
        }
        tgt = target;
        own = Set.copyOf(owned);
        if (own.equals(tgt)) {
          target = null;
          reconciling = false;
          return;
        }
      }
      Set<IdPartition> revoked = new HashSet<>(own);
      revoked.removeAll(tgt);
      if (!revoked.isEmpty()) {
        Set<TopicPartition> names = knownNames(revoked);
        callback("onPartitionsRevoked", () -> listener.onPartitionsRevoked(names));
        long v;
        synchronized (lock) {
          owned.removeAll(revoked); // (fenced meanwhile too: the listener was told)
          v = ++ownedVersion;
          publishLocked();
          wakeLocked(); // report the release at once: its new owner waits for it
        }
        awaitReported(v, gen);
        continue;
      }
      Set<IdPartition> added = new HashSet<>(tgt);
      added.removeAll(own);
      Set<TopicPartition> names = names(added);
      if (names == null) {
        synchronized (lock) {
          if (generation == gen) {
            reconciling = false; // unknown topic ids: tried again after the next heartbeat
          }
        }
        return;
      }
      callback("onPartitionsAssigned", () -> listener.onPartitionsAssigned(names));
      synchronized (lock) {
        owned.addAll(added); // (fenced meanwhile too: then they are reported lost)
        ownedVersion++;
        publishLocked();
        wakeLocked();
      }
    }
  }

  /** Until a heartbeat reporting owned at version v was answered (bounded; see reconcile). */
  private void awaitReported(long v, int gen) {
    long end = System.nanoTime()
        + TimeUnit.MILLISECONDS.toNanos(Math.max(5_000, 2L * heartbeatIntervalMs));
    synchronized (lock) {
      while (ackedVersion < v && generation == gen && !closing) {
        long left = TimeUnit.NANOSECONDS.toMillis(end - System.nanoTime());
        if (left <= 0) {
          return;
        }
        try {
          lock.wait(left);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          return;
        }
      }
    }
  }

  private void computeAssignmentAside() {
    try {
      if (computeAssignment()) {
        synchronized (lock) {
          wakeLocked(); // installed: heartbeat at once for the new target
        }
      }
    } catch (StatusRuntimeException | GroupMemberException e) {
      // a later heartbeat asks again if it is still needed
      LOG.log(System.Logger.Level.INFO, "client-side assignment failed: {0}", e.getMessage());
    } finally {
      computing.set(false);
    }
  }

  /**
   * The coordinator chose this member to compute the group's target: prepare, assign (on the
   * call pool, beside the heartbeats), install. A failed call ends the computation (a later
   * heartbeat says again if it is still needed); an assignor that throws installs error 1 so
   * that another member is chosen. True when a target was installed.
   */
  private boolean computeAssignment() {
    ConsumerGroupPrepareAssignmentResponse prepared =
        stub(router.coordinator())
            .consumerGroupPrepareAssignment(
                ConsumerGroupPrepareAssignmentRequest.newBuilder()
                    .setGroupId(groupId)
                    .setMemberId(memberId)
                    .setMemberEpoch(epoch)
                    .build());
    if (prepared.getErrorCode() != Errors.NONE) {
      return false; // moved on, or no longer the chosen member
    }
    Map<String, String> names = new HashMap<>();
    Map<String, String> ids = new HashMap<>();
    Map<String, Integer> topics = new TreeMap<>();
    for (PreparedTopic t : prepared.getTopicsList()) {
      names.put(t.getTopicId(), t.getTopicName());
      ids.put(t.getTopicName(), t.getTopicId());
      topics.put(t.getTopicName(), t.getNumPartitions());
      topicNames.put(t.getTopicId(), t.getTopicName());
    }
    List<ClientAssignor.MemberSpec> members = new ArrayList<>();
    for (PreparedMember m : prepared.getMembersList()) {
      Set<String> subscribed = new TreeSet<>();
      for (String id : m.getSubscribedTopicIdsList()) {
        if (names.containsKey(id)) {
          subscribed.add(names.get(id));
        }
      }
      Set<TopicPartition> current = new TreeSet<>();
      for (TopicPartitions tp : m.getTargetPartitionsList()) {
        String name = names.get(tp.getTopicId());
        if (name != null) {
          tp.getPartitionsList().forEach(p -> current.add(new TopicPartition(name, p)));
        }
      }
      members.add(new ClientAssignor.MemberSpec(m.getMemberId(),
          m.hasInstanceId() ? m.getInstanceId() : null, m.hasRackId() ? m.getRackId() : null,
          subscribed, current, m.getAssignor().getMetadataVersion(),
          m.getAssignor().getMetadataBytes().toByteArray(), m.getMemberType()));
    }
    ConsumerGroupInstallAssignmentRequest.Builder install =
        ConsumerGroupInstallAssignmentRequest.newBuilder()
            .setGroupId(groupId)
            .setMemberId(memberId)
            .setGroupEpoch(prepared.getGroupEpoch());
    try {
      Map<String, ClientAssignor.MemberAssignment> result =
          clientAssignor.assignWithMetadata(new ClientAssignor.GroupSpec(
              prepared.getGroupEpoch(), prepared.getAssignorName(),
              prepared.getAssignorVersion(), List.copyOf(members),
              Collections.unmodifiableMap(topics)));
      new TreeMap<>(result).forEach(
          (member, assigned) -> {
            Map<String, List<Integer>> byId = new TreeMap<>();
            for (TopicPartition tp : assigned.partitions()) {
              String id = ids.get(tp.topic());
              if (id == null) {
                throw new IllegalArgumentException("not a subscribed topic: " + tp.topic());
              }
              byId.computeIfAbsent(id, k -> new ArrayList<>()).add(tp.partition());
            }
            InstalledMember.Builder m = InstalledMember.newBuilder().setMemberId(member)
                .setMetadataVersion(assigned.metadataVersion())
                .setMetadataBytes(ByteString.copyFrom(assigned.metadataBytes()))
                .setError(assigned.error());
            byId.forEach((id, ps) -> m.addPartitions(
                TopicPartitions.newBuilder().setTopicId(id).addAllPartitions(ps)));
            install.addMembers(m);
          });
    } catch (RuntimeException e) {
      report(new GroupMemberException("ClientAssignor " + clientAssignor.name() + " threw " + e,
          e));
      install.clearMembers().setError(1);
    }
    ConsumerGroupInstallAssignmentResponse installed =
        stub(router.coordinator()).consumerGroupInstallAssignment(
            install.setMemberEpoch(epoch).build());
    int code = installed.getErrorCode();
    if (code == Errors.INVALID_ASSIGNMENT && install.getError() == 0) {
      // the group moved on while we computed (a later heartbeat asks again), or the
      // assignor's result is wrong: then hand the computation over
      ConsumerGroupPrepareAssignmentResponse again =
          stub(router.coordinator())
              .consumerGroupPrepareAssignment(
                  ConsumerGroupPrepareAssignmentRequest.newBuilder()
                      .setGroupId(groupId)
                      .setMemberId(memberId)
                      .setMemberEpoch(epoch)
                      .build());
      if (again.getErrorCode() == Errors.NONE
          && again.getGroupEpoch() == prepared.getGroupEpoch()) {
        report(new GroupMemberException(code, "ConsumerGroupInstallAssignment: error " + code
            + " " + installed.getErrorMessage()));
        stub(router.coordinator()).consumerGroupInstallAssignment(
            install.clearMembers().setError(1).setMemberEpoch(epoch).build());
      }
    } else if (code != Errors.NONE
        && code != Errors.STALE_MEMBER_EPOCH
        && code != Errors.UNKNOWN_MEMBER_ID) {
      report(new GroupMemberException(code, "ConsumerGroupInstallAssignment: error " + code
          + " " + installed.getErrorMessage()));
    }
    return code == Errors.NONE && install.getError() == 0;
  }

  /**
   * Fenced (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, or FENCED_INSTANCE_ID): a running callback
   * is let finish, then onPartitionsLost(owned) runs on the callback thread (not revoked:
   * another member may own them by now); this heartbeat thread waits for it and rejoins at
   * epoch 0 with the same id.
   */
  private void fenced() {
    synchronized (lock) {
      generation++;
      target = null;
      epoch = 0;
      lock.notifyAll(); // (a reconciliation waiting for a report stops)
    }
    full = true;
    reported = null;
    declared = null;
    await(onCallbackThread(() -> {
      Set<IdPartition> lost;
      synchronized (lock) {
        lost = Set.copyOf(owned);
        owned.clear();
        ownedVersion++;
        reconciling = false;
        publishLocked();
      }
      Set<TopicPartition> names = knownNames(lost);
      if (!names.isEmpty()) {
        callback("onPartitionsLost", () -> listener.onPartitionsLost(names));
      }
    }));
  }

  /** On the callback thread, when closing: onPartitionsRevoked(everything owned). */
  private void revokeAll() {
    Set<IdPartition> own;
    synchronized (lock) {
      if (epoch <= 0) {
        return; // never joined, or fenced: nothing to revoke (a loss was reported)
      }
      own = Set.copyOf(owned);
    }
    Set<TopicPartition> names = knownNames(own);
    if (!names.isEmpty()) {
      callback("onPartitionsRevoked", () -> listener.onPartitionsRevoked(names));
    }
    synchronized (lock) {
      owned.removeAll(own);
      ownedVersion++;
      target = null;
      publishLocked();
    }
  }

  /** Close: after revokeAll, the leave heartbeat (epoch -1; -2 for a static member). */
  private void leave() {
    if (epoch <= 0) {
      return;
    }
    ConsumerGroupHeartbeatRequest.Builder b =
        ConsumerGroupHeartbeatRequest.newBuilder()
            .setGroupId(groupId)
            .setMemberId(memberId)
            .setMemberEpoch(instanceId != null ? -2 : -1);
    if (instanceId != null) {
      b.setInstanceId(instanceId);
    }
    try {
      ConsumerGroupHeartbeatResponse r =
          routed(s -> s.consumerGroupHeartbeat(b.build()), ConsumerGroupHeartbeatResponse::getErrorCode,
              5_000);
      if (r.getErrorCode() != Errors.NONE && !Errors.fenced(r.getErrorCode())) {
        report(new GroupMemberException(r.getErrorCode(), "leave: error " + r.getErrorCode()
            + " " + r.getErrorMessage()));
      }
    } catch (RuntimeException e) {
      report(new GroupMemberException("leave: " + e.getMessage(), e));
    }
    epoch = instanceId != null ? -2 : -1;
  }

  /** assignment := the names of owned (from the cache: the callbacks' names resolved them). */
  private void publishLocked() {
    assignment = Collections.unmodifiableSet(knownNames(owned));
  }

  /** The names of the partitions whose topic ids are known (no catalog call). */
  private Set<TopicPartition> knownNames(Set<IdPartition> partitions) {
    Set<TopicPartition> names = new TreeSet<>();
    for (IdPartition p : partitions) {
      String name = topicNames.get(p.topicId());
      if (name != null) {
        names.add(new TopicPartition(name, p.partition()));
      }
    }
    return names;
  }

  private void callback(String name, Runnable callback) {
    try {
      callback.run();
    } catch (RuntimeException e) {
      report(new GroupMemberException("RebalanceListener." + name + " threw " + e, e));
    }
  }

  private void report(GroupMemberException e) {
    try {
      errorHandler.accept(e);
    } catch (RuntimeException ignored) {
      // the handler's own failure must not stop the member
    }
  }

  // ---- topic ids <-> names ---------------------------------------------------------------

  /** Names of the partitions, or null when a topic id is unknown even after a refresh. */
  private Set<TopicPartition> names(Set<IdPartition> partitions) {
    Set<String> missing = new HashSet<>();
    for (IdPartition p : partitions) {
      if (!topicNames.containsKey(p.topicId())) {
        missing.add(p.topicId());
      }
    }
    if (!missing.isEmpty()) {
      resolve(missing);
    }
    Set<TopicPartition> names = new TreeSet<>();
    for (IdPartition p : partitions) {
      String name = topicNames.get(p.topicId());
      if (name == null) {
        return null;
      }
      names.add(new TopicPartition(name, p.partition()));
    }
    return names;
  }

  private void resolve(Set<String> topicIds) {
    try {
      for (DescribedTopic t :
          TopicCatalogGrpc.newBlockingStub(router.coordinator())
              .withDeadlineAfter(RPC_TIMEOUT_MS, TimeUnit.MILLISECONDS)
              .describeTopics(DescribeTopicsRequest.newBuilder().addAllTopicIds(topicIds).build())
              .getTopicsList()) {
        if (t.getErrorCode() == Errors.NONE && !t.getName().isEmpty()) {
          topicNames.put(t.getTopicId(), t.getName());
        }
      }
    } catch (StatusRuntimeException | GroupMemberException e) {
      LOG.log(System.Logger.Level.DEBUG, "DescribeTopics failed: {0}", e.getMessage());
    }
  }

  private static Set<IdPartition> fromProto(TopicPartitionsList list) {
    Set<IdPartition> out = new HashSet<>();
    for (TopicPartitions tp : list.getTopicPartitionsList()) {
      for (int p : tp.getPartitionsList()) {
        out.add(new IdPartition(tp.getTopicId(), p));
      }
    }
    return out;
  }

  private static TopicPartitionsList toProto(Set<IdPartition> partitions) {
    Map<String, List<Integer>> byTopic = new TreeMap<>();
    for (IdPartition p : partitions) {
      byTopic.computeIfAbsent(p.topicId(), k -> new ArrayList<>()).add(p.partition());
    }
    TopicPartitionsList.Builder b = TopicPartitionsList.newBuilder();
    byTopic.forEach(
        (id, ps) -> {
          ps.sort(null);
          b.addTopicPartitions(TopicPartitions.newBuilder().setTopicId(id).addAllPartitions(ps));
        });
    return b.build();
  }

  // ---- commit / fetch / describe -----------------------------------------------------------

  /**
   * Commits the offsets at the member's current epoch. Completes with each partition's Kafka
   * error code (0: committed); on STALE_MEMBER_EPOCH (113) it waits for the next heartbeat
   * and retries once. Completes exceptionally ({@link GroupMemberException}) when the
   * coordinator cannot be reached within 30 s.
   */
  public CompletableFuture<Map<TopicPartition, Integer>> commit(Map<TopicPartition, Long> offsets) {
    Objects.requireNonNull(offsets, "offsets");
    return CompletableFuture.supplyAsync(
        () -> {
          Map<TopicPartition, Integer> result = commitOnce(offsets);
          if (result.containsValue(Errors.STALE_MEMBER_EPOCH)) {
            awaitNextHeartbeat();
            result = commitOnce(offsets);
          }
          return result;
        },
        calls);
  }

  private Map<TopicPartition, Integer> commitOnce(Map<TopicPartition, Long> offsets) {
    Map<String, OffsetCommitRequestTopic.Builder> topicsByName = new TreeMap<>();
    offsets.forEach(
        (tp, offset) ->
            topicsByName
                .computeIfAbsent(tp.topic(), n -> OffsetCommitRequestTopic.newBuilder().setName(n))
                .addPartitions(
                    OffsetCommitRequestPartition.newBuilder()
                        .setPartitionIndex(tp.partition())
                        .setCommittedOffset(offset)));
    OffsetCommitRequest.Builder request =
        OffsetCommitRequest.newBuilder()
            .setGroupId(groupId)
            .setMemberId(memberId)
            .setGenerationIdOrMemberEpoch(epoch);
    if (instanceId != null) {
      request.setGroupInstanceId(instanceId);
    }
    topicsByName.values().forEach(request::addTopics);
    OffsetCommitResponse response =
        routed(s -> s.offsetCommit(request.build()), GroupMember::commitRouteError,
            CALL_DEADLINE_MS);
    Map<TopicPartition, Integer> result = new LinkedHashMap<>();
    for (OffsetCommitResponseTopic t : response.getTopicsList()) {
      for (OffsetCommitResponsePartition p : t.getPartitionsList()) {
        result.put(new TopicPartition(t.getName(), p.getPartitionIndex()), p.getErrorCode());
      }
    }
    return result;
  }

  private static int commitRouteError(OffsetCommitResponse r) {
    for (OffsetCommitResponseTopic t : r.getTopicsList()) {
      for (OffsetCommitResponsePartition p : t.getPartitionsList()) {
        if (Errors.reroute(p.getErrorCode())) {
          return p.getErrorCode();
        }
      }
    }
    return Errors.NONE;
  }

  /**
   * The group's committed offsets of these partitions (all of the group's when empty), read
   * with the member's id and epoch; -1 for a partition without a committed offset.
   */
  public CompletableFuture<Map<TopicPartition, Long>> fetch(Collection<TopicPartition> partitions) {
    Objects.requireNonNull(partitions, "partitions");
    return CompletableFuture.supplyAsync(
        () -> {
          OffsetFetchResponseGroup g = fetchOnce(partitions);
          if (g.getErrorCode() == Errors.STALE_MEMBER_EPOCH) {
            awaitNextHeartbeat();
            g = fetchOnce(partitions);
          }
          if (g.getErrorCode() != Errors.NONE) {
            throw new GroupMemberException(g.getErrorCode(), "OffsetFetch: error "
                + g.getErrorCode() + " " + g.getErrorMessage());
          }
          Map<TopicPartition, Long> out = new TreeMap<>();
          for (OffsetFetchResponseTopics t : g.getTopicsList()) {
            for (OffsetFetchResponsePartitions p : t.getPartitionsList()) {
              if (p.getErrorCode() != Errors.NONE) {
                throw new GroupMemberException(p.getErrorCode(), "OffsetFetch " + t.getName()
                    + "-" + p.getPartitionIndex() + ": error " + p.getErrorCode());
              }
              out.put(new TopicPartition(t.getName(), p.getPartitionIndex()),
                  p.getCommittedOffset());
            }
          }
          return out;
        },
        calls);
  }

  private OffsetFetchResponseGroup fetchOnce(Collection<TopicPartition> partitions) {
    OffsetFetchRequestGroup.Builder group = OffsetFetchRequestGroup.newBuilder().setGroupId(groupId);
    int e = epoch;
    if (e > 0) {
      group.setMemberId(memberId).setMemberEpoch(e);
    }
    if (!partitions.isEmpty()) {
      Map<String, OffsetFetchRequestTopics.Builder> byName = new TreeMap<>();
      for (TopicPartition tp : partitions) {
        byName
            .computeIfAbsent(tp.topic(), n -> OffsetFetchRequestTopics.newBuilder().setName(n))
            .addPartitionIndexes(tp.partition());
      }
      OffsetFetchRequestTopicsList.Builder list = OffsetFetchRequestTopicsList.newBuilder();
      byName.values().forEach(list::addTopics);
      group.setTopics(list);
    }
    OffsetFetchRequest request = OffsetFetchRequest.newBuilder().addGroups(group).build();
    return routed(s -> s.offsetFetch(request), r -> r.getGroups(0).getErrorCode(),
        CALL_DEADLINE_MS).getGroups(0);
  }

  /** The group as ConsumerGroupDescribe tells it. */
  public CompletableFuture<ConsumerGroupDescribedGroup> describe() {
    return CompletableFuture.supplyAsync(
        () -> {
          ConsumerGroupDescribedGroup g =
              routed(
                      s -> s.consumerGroupDescribe(
                          ConsumerGroupDescribeRequest.newBuilder().addGroupIds(groupId).build()),
                      r -> r.getGroups(0).getErrorCode(),
                      CALL_DEADLINE_MS)
                  .getGroups(0);
          if (g.getErrorCode() != Errors.NONE) {
            throw new GroupMemberException(g.getErrorCode(), "ConsumerGroupDescribe: error "
                + g.getErrorCode() + " " + g.getErrorMessage());
          }
          return g;
        },
        calls);
  }

  /** Waits (up to two heartbeat intervals, at least 5 s) for the next answered heartbeat. */
  private void awaitNextHeartbeat() {
    long waitMs = Math.max(5_000, 2L * heartbeatIntervalMs);
    synchronized (lock) {
      long seen = heartbeats;
      wake = true; // heartbeat now rather than at the interval
      lock.notifyAll();
      long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(waitMs);
      while (heartbeats == seen && !closing) {
        long left = TimeUnit.NANOSECONDS.toMillis(end - System.nanoTime());
        if (left <= 0) {
          return;
        }
        try {
          lock.wait(left);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          return;
        }
      }
    }
  }

  /**
   * One RPC to the group's coordinator, re-finding it and retrying with backoff on an
   * unreachable coordinator or a routing error (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
   * COORDINATOR_LOAD_IN_PROGRESS) until deadlineMs has passed.
   */
  private <T> T routed(
      Function<GroupCoordinatorBlockingStub, T> rpc, ToIntFunction<T> routeError, long deadlineMs) {
    Backoff backoff = new Backoff();
    long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(deadlineMs);
    RuntimeException last;
    while (true) {
      try {
        T response = rpc.apply(stub(router.coordinator()));
        int code = routeError.applyAsInt(response);
        if (!Errors.reroute(code)) {
          return response;
        }
        last = new GroupMemberException(code, "coordinator error " + code);
      } catch (StatusRuntimeException e) {
        if (!transient_(e)) {
          throw new GroupMemberException(e.getStatus().toString(), e);
        }
        last = e;
      } catch (GroupMemberException e) {
        last = e;
      }
      router.forget();
      long pause = backoff.next();
      if (System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(pause) > end) {
        throw last instanceof GroupMemberException g
            ? g
            : new GroupMemberException("coordinator unreachable: " + last.getMessage(), last);
      }
      try {
        Thread.sleep(pause);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new GroupMemberException("interrupted", e);
      }
    }
  }

  /**
   * A failure to reach the coordinator: re-route and retry, without reporting it. Besides
   * UNAVAILABLE and the like, grpc-java answers a call written to a connection the server
   * just closed (a shard killed) with UNKNOWN "channel closed" (a ClosedChannelException).
   */
  private static boolean transient_(StatusRuntimeException e) {
    Status.Code c = e.getStatus().getCode();
    if (c == Status.Code.UNKNOWN) {
      for (Throwable t = e.getStatus().getCause(); t != null; t = t.getCause()) {
        if (t instanceof java.nio.channels.ClosedChannelException) {
          return true;
        }
      }
    }
    return c == Status.Code.UNAVAILABLE || c == Status.Code.DEADLINE_EXCEEDED
        || c == Status.Code.CANCELLED || c == Status.Code.ABORTED;
  }

  private static GroupCoordinatorBlockingStub stub(io.grpc.Channel channel) {
    return GroupCoordinatorGrpc.newBlockingStub(channel)
        .withDeadlineAfter(RPC_TIMEOUT_MS, TimeUnit.MILLISECONDS);
  }

  // ---- close -----------------------------------------------------------------------------

  /**
   * Leaves the group: lets a running callback finish, revokes what the member owns
   * (onPartitionsRevoked, on the callback thread, while the heartbeats go on), sends the leave
   * heartbeat (epoch -1; -2 for a static member, which keeps its assignment for the session
   * timeout), stops the threads and closes the channels. Waits for all that (at most the
   * rebalance timeout + 15 s); from a callback it returns at once and the member revokes and
   * leaves after the callback returned. Idempotent.
   */
  @Override
  public void close() {
    synchronized (lock) {
      if (closed) {
        return;
      }
      closed = true;
      closing = true;
      lock.notifyAll();
    }
    if (Thread.currentThread() == loop || Thread.currentThread() == callbackThread) {
      return; // from a callback: the loop revokes, leaves and releases everything after it
    }
    if (loop.isAlive()) {
      try {
        loop.join(rebalanceTimeoutMs + 15_000L);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
    release();
  }

  private void release() {
    calls.shutdownNow();
    callbacks.shutdown(); // (a callback still running -- close() gave up waiting -- goes on)
    router.close();
  }

  private static String newMemberId() {
    UUID u = UUID.randomUUID();
    ByteBuffer b = ByteBuffer.allocate(16);
    b.putLong(u.getMostSignificantBits()).putLong(u.getLeastSignificantBits());
    return Base64.getUrlEncoder().withoutPadding().encodeToString(b.array());
  }

  // ---- builder ---------------------------------------------------------------------------

  /** Configuration of a {@link GroupMember}; {@link #build()} checks it. */
  public static final class Builder {
    private List<String> bootstrap = List.of();
    private String groupId;
    private List<String> topics;
    private String pattern;
    private String rackId;
    private String instanceId;
    private String serverAssignor;
    private ClientAssignor clientAssignor;
    private int rebalanceTimeoutMs = 30_000;
    private RebalanceListener listener;
    private Consumer<GroupMemberException> errorHandler =
        e -> LOG.log(System.Logger.Level.WARNING, e.getMessage());
    private Router.Tls tls;
    private BiConsumer<ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse>
        heartbeatObserver;

    private Builder() {}

    /** gRPC addresses (host:port) of any shards; FindCoordinator is asked there. */
    public Builder bootstrap(String... addresses) {
      return bootstrap(List.of(addresses));
    }

    public Builder bootstrap(List<String> addresses) {
      List<String> all = new ArrayList<>();
      for (String a : addresses) {
        for (String part : a.split(",")) {
          if (!part.isBlank()) {
            all.add(part.trim());
          }
        }
      }
      this.bootstrap = List.copyOf(all);
      return this;
    }

    public Builder groupId(String groupId) {
      this.groupId = groupId;
      return this;
    }

    /** Subscribe to these topic names (or use {@link #pattern}). */
    public Builder topics(String... topics) {
      return topics(List.of(topics));
    }

    public Builder topics(Collection<String> topics) {
      this.topics = List.copyOf(topics);
      return this;
    }

    /** Subscribe to the topics matching this RE2 regex, evaluated by the coordinator. */
    public Builder pattern(String regex) {
      this.pattern = regex;
      return this;
    }

    public Builder rack(String rackId) {
      this.rackId = rackId;
      return this;
    }

    /** A static member's instance id (group.instance.id). */
    public Builder instanceId(String instanceId) {
      this.instanceId = instanceId;
      return this;
    }

    /** The server-side assignor to ask for ("uniform", "range", ...). */
    public Builder serverAssignor(String name) {
      this.serverAssignor = name;
      return this;
    }

    /**
     * A client-side assignor this member declares (and runs when the coordinator chooses it).
     * The group uses it when every member declares it and client-side assignors are enabled
     * for the group, or when members ask for it by name with {@link #serverAssignor}.
     */
    public Builder clientAssignor(ClientAssignor assignor) {
      this.clientAssignor = assignor;
      return this;
    }

    public Builder rebalanceTimeoutMs(int ms) {
      this.rebalanceTimeoutMs = ms;
      return this;
    }

    public Builder listener(RebalanceListener listener) {
      this.listener = listener;
      return this;
    }

    /**
     * Where errors the member cannot act on go (static member conflicts
     * UNRELEASED_INSTANCE_ID / FENCED_INSTANCE_ID, an invalid regex, a callback that threw,
     * ...): the member keeps retrying with backoff. Default: logged as a warning.
     */
    public Builder errorHandler(Consumer<GroupMemberException> handler) {
      this.errorHandler = Objects.requireNonNull(handler);
      return this;
    }

    /** TLS: trust caFile (null: the JVM's default trust store); plaintext when never called. */
    public Builder tls(File caFile) {
      return tls(caFile, null, null, null);
    }

    /**
     * TLS with an optional client certificate and key (PEM, mTLS) and an optional server name
     * that overrides the address's host for verification.
     */
    public Builder tls(File caFile, File certFile, File keyFile, String serverName) {
      if ((certFile == null) != (keyFile == null)) {
        throw new IllegalArgumentException("a client certificate needs its key and vice versa");
      }
      this.tls = new Router.Tls(caFile, certFile, keyFile, serverName);
      return this;
    }

    /**
     * Diagnostics: called on the heartbeat thread with every heartbeat request as sent and
     * its response (null when the call failed). It must not block.
     */
    public Builder heartbeatObserver(
        BiConsumer<ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse> observer) {
      this.heartbeatObserver = observer;
      return this;
    }

    public GroupMember build() {
      if (bootstrap.isEmpty()) {
        throw new IllegalArgumentException("bootstrap: at least one host:port");
      }
      if (groupId == null || groupId.isEmpty()) {
        throw new IllegalArgumentException("groupId is required");
      }
      if ((topics == null) == (pattern == null)) {
        throw new IllegalArgumentException("subscribe with exactly one of topics(...) or pattern(...)");
      }
      if (rebalanceTimeoutMs <= 0) {
        throw new IllegalArgumentException("rebalanceTimeoutMs must be positive");
      }
      if (listener == null) {
        listener = new RebalanceListener() {
          @Override
          public void onPartitionsAssigned(Set<TopicPartition> partitions) {}

          @Override
          public void onPartitionsRevoked(Set<TopicPartition> partitions) {}
        };
      }
      return new GroupMember(this);
    }
  }
}
