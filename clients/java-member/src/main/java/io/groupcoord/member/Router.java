package io.groupcoord.member;

import io.groupcoord.v1.Coordinator;
import io.groupcoord.v1.FindCoordinatorRequest;
import io.groupcoord.v1.GroupCoordinatorGrpc;
import io.grpc.ChannelCredentials;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.StatusRuntimeException;
import io.grpc.TlsChannelCredentials;
import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * The member's channels: one per address (bootstrap addresses and coordinators), and the
 * group's coordinator as FindCoordinator last named it. Thread-safe.
 */
final class Router implements AutoCloseable {
  static final long FIND_TIMEOUT_MS = 5_000;

  private final List<String> bootstrap;
  private final String groupId;
  private final ChannelCredentials credentials;
  private final String authority;
  private final Map<String, ManagedChannel> channels = new HashMap<>();
  private int nextBootstrap;
  private String coordinator;
  private boolean closed;

  Router(List<String> bootstrap, String groupId, Tls tls) {
    this.bootstrap = List.copyOf(bootstrap);
    this.groupId = groupId;
    this.credentials = tls == null ? InsecureChannelCredentials.create() : tls.credentials();
    this.authority = tls == null ? null : tls.serverName();
  }

  /** The coordinator's channel, asking FindCoordinator when none is known. */
  synchronized ManagedChannel coordinator() {
    if (coordinator == null) {
      coordinator = find();
    }
    return channel(coordinator);
  }

  /** Forget the coordinator (NOT_COORDINATOR, unreachable, ...): the next call finds it. */
  synchronized void forget() {
    coordinator = null;
  }

  /** Any bootstrap address's channel (for the topic catalog, which every shard serves). */
  synchronized ManagedChannel any() {
    return channel(bootstrap.get(nextBootstrap % bootstrap.size()));
  }

  /** FindCoordinator on the bootstrap addresses in turn, starting after the last one used. */
  private String find() {
    GroupMemberException last = null;
    for (int i = 0; i < bootstrap.size(); i++) {
      String address = bootstrap.get(nextBootstrap % bootstrap.size());
      try {
        Coordinator c =
            GroupCoordinatorGrpc.newBlockingStub(channel(address))
                .withDeadlineAfter(FIND_TIMEOUT_MS, TimeUnit.MILLISECONDS)
                .findCoordinator(
                    FindCoordinatorRequest.newBuilder()
                        .setKeyType(0)
                        .addCoordinatorKeys(groupId)
                        .build())
                .getCoordinators(0);
        if (c.getErrorCode() == Errors.NONE) {
          return c.getHost() + ":" + c.getPort();
        }
        last =
            new GroupMemberException(
                c.getErrorCode(),
                "FindCoordinator(" + groupId + ") on " + address + ": error " + c.getErrorCode()
                    + " " + c.getErrorMessage());
      } catch (StatusRuntimeException e) {
        last = new GroupMemberException("FindCoordinator on " + address + ": " + e.getStatus(), e);
      }
      nextBootstrap++;
    }
    throw last;
  }

  private ManagedChannel channel(String address) {
    if (closed) {
      throw new IllegalStateException("the member is closed");
    }
    return channels.computeIfAbsent(
        address,
        a -> {
          ManagedChannelBuilder<?> b = Grpc.newChannelBuilder(a, credentials);
          if (authority != null) {
            b.overrideAuthority(authority);
          }
          return b.build();
        });
  }

  @Override
  public void close() {
    List<ManagedChannel> all;
    synchronized (this) {
      closed = true;
      all = List.copyOf(channels.values());
      channels.clear();
    }
    for (ManagedChannel c : all) {
      c.shutdown();
    }
    for (ManagedChannel c : all) {
      try {
        if (!c.awaitTermination(2, TimeUnit.SECONDS)) {
          c.shutdownNow();
        }
      } catch (InterruptedException e) {
        c.shutdownNow();
        Thread.currentThread().interrupt();
      }
    }
  }

  /** TLS settings: the CA to trust, an optional client certificate (mTLS), a server name. */
  record Tls(File caFile, File certFile, File keyFile, String serverName) {
    ChannelCredentials credentials() {
      try {
        TlsChannelCredentials.Builder b = TlsChannelCredentials.newBuilder();
        if (caFile != null) {
          b.trustManager(caFile);
        }
        if (certFile != null) {
          b.keyManager(certFile, keyFile);
        }
        return b.build();
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
  }
}
