"""Real shard processes on a private Redis, a load that remembers what was acknowledged, and
the checks of RELIABILITY.md that the multi-shard tests run after every step.

* :class:`Cluster` -- ``groupcoord shard`` processes (node ids 0..n) sharing one Redis
  server that the test may restart; kill -9, SIGTERM, SIGSTOP/SIGCONT by node id.
* :class:`CommitLoad` -- writers committing offsets through :class:`CoordinatorClient`
  (find, cache, re-route); a ledger of the last acknowledged value of every key and the
  values whose outcome is unknown since (sent, no success seen).
* :class:`ConsumerGroups` -- KIP-848 members heartbeating through the same client.
* checks: no acknowledged commit lost or invented (stored value in {last acked} + unknowns),
  no record under a stale epoch in any partition's log (read from Redis itself), every group
  served and every consumer group Stable again, partitions evenly spread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import redis
from groupcoord.v1 import (
    catalog_pb2,
    catalog_pb2_grpc,
    common_pb2,
    consumer_group_pb2,
    offsets_pb2,
)

from services.client import CoordinatorClient, CoordinatorUnavailableError, RetryPolicy
from shards.core.placement import partition_for
from shards.ownership.rendezvous import assign
from tests.support.netns import NetNamespace
from tests.support.offsets import ensure_topic
from tests.support.processes import ServerProcess
from tests.support.redis_server import RedisServer

log = logging.getLogger("tests.multishard")

TOPIC = "orders"
TOPIC_PARTITIONS = 6


def groups_for_partitions(prefix: str, num_partitions: int, per_partition: int) -> list[str]:
    """Group ids covering every offsets partition ``per_partition`` times."""
    found: dict[int, list[str]] = {p: [] for p in range(num_partitions)}
    i = 0
    while any(len(v) < per_partition for v in found.values()):
        g = f"{prefix}-{i}"
        p = partition_for(g, num_partitions)
        if len(found[p]) < per_partition:
            found[p].append(g)
        i += 1
    return [g for p in sorted(found) for g in found[p]]


# ---- the cluster -------------------------------------------------------------------------
@dataclass
class Cluster:
    tmp: Path
    redis_server: RedisServer
    num_partitions: int = 12
    lease_ms: int = 1500
    #: key prefix in Redis (several clusters may share a server)
    prefix: str = "gc"
    shards: dict[int, ServerProcess] = field(default_factory=dict)
    #: node id -> its gRPC port: a restarted shard comes back at the same address, as a
    #: StatefulSet pod does (clients' bootstrap lists stay valid)
    ports: dict[int, int] = field(default_factory=dict)
    paused: set[int] = field(default_factory=set)
    #: coordinator settings for fast tests (consumer group timers in ms)
    config: str = (
        "consumer_group_heartbeat_interval_ms=300,consumer_group_min_heartbeat_interval_ms=100,"
        "consumer_group_session_timeout_ms=20000,consumer_group_min_session_timeout_ms=1000"
    )
    #: more ``groupcoord shard`` options (e.g. ``--upstream-bootstrap`` for proxy mode)
    extra_args: list[str] = field(default_factory=list)
    #: topics ``wait_settled`` creates in the catalog for the tests that commit to them
    #: (none in proxy mode, where the catalog mirrors the upstream and is read-only)
    catalog_topics: tuple[str, ...] = ("t", "zombie")
    #: node id -> the network namespace it runs in (the others run on the host's loopback);
    #: such a shard listens on, and reaches the store from, its veth address
    netns: dict[int, NetNamespace] = field(default_factory=dict)
    #: node id -> more environment for that shard only (e.g. libfaketime's)
    node_env: dict[int, dict[str, str]] = field(default_factory=dict)
    #: node id -> more options for that shard only
    node_args: dict[int, list[str]] = field(default_factory=dict)

    @property
    def store_url(self) -> str:
        return f"{self.redis_server.url}?key_prefix={self.prefix}"

    def node_store_url(self, node_id: int) -> str:
        """The store as ``node_id`` reaches it: through its veth when it is in a namespace."""
        ns = self.netns.get(node_id)
        if ns is None:
            return self.store_url
        return f"redis://{ns.host_ip}:{self.redis_server.port}/0?key_prefix={self.prefix}"

    def log_path(self, node_id: int) -> Path:
        return self.tmp / f"shard-{node_id}.log"

    def start(self, node_id: int) -> ServerProcess:
        assert node_id not in self.shards or self.shards[node_id].proc.poll() is not None
        ns = self.netns.get(node_id)
        for port in dict.fromkeys([self.ports.get(node_id, 0), 0]):
            args = [
                "shard",
                "--store",
                self.node_store_url(node_id),
                *(["--host", ns.ns_ip] if ns is not None else []),
                "--node-id",
                str(node_id),
                "--grpc-port",
                str(port),
                "--lease-ms",
                str(self.lease_ms),
                "--num-partitions",
                str(self.num_partitions),
                "--set",
                self.config,
                *self.extra_args,
                *self.node_args.get(node_id, []),
            ]
            try:
                proc = ServerProcess(
                    args,
                    self.log_path(node_id),
                    env={"GROUPCOORD_LOG_LEVEL": "INFO", **self.node_env.get(node_id, {})},
                    prefix=ns.prefix if ns is not None else (),
                )
            except RuntimeError:
                if port == 0:
                    raise
                continue  # the old port was taken meanwhile (another test run): any port
            if proc.proc.poll() is None and "grpc" in proc.ports:
                break
            proc.kill()
        else:
            raise RuntimeError(f"shard {node_id} did not start")
        self.ports[node_id] = proc.grpc_port
        self.shards[node_id] = proc
        return proc

    def kill(self, node_id: int) -> None:
        self.paused.discard(node_id)
        self.shards.pop(node_id).kill()

    def terminate(self, node_id: int) -> int:
        return self.shards.pop(node_id).terminate(60)

    def pause(self, node_id: int) -> None:
        self.paused.add(node_id)
        self.shards[node_id].pause()

    def resume(self, node_id: int) -> None:
        self.paused.discard(node_id)
        self.shards[node_id].resume()

    def addresses(self) -> list[str]:
        return [s.grpc_address for n, s in sorted(self.shards.items()) if n not in self.paused]

    def close(self) -> None:
        for node_id in list(self.shards):
            with contextlib.suppress(Exception):
                if node_id in self.paused:
                    self.resume(node_id)
                self.kill(node_id)

    # ---- what Redis says -----------------------------------------------------------------
    def redis_client(self) -> redis.Redis:
        return self.redis_server.client(db=0)

    def leases(self) -> dict[int, tuple[str, int] | None]:
        """partition -> (owner, epoch) of the live lease, or None."""
        with self.redis_client() as r:
            out: dict[int, tuple[str, int] | None] = {}
            for p in range(self.num_partitions):
                owner, epoch = r.hmget(f"{self.prefix}:{{p{p}}}:lease", ["owner", "epoch"])
                out[p] = (owner.decode(), int(epoch)) if owner else None
            return out

    def members(self) -> dict[str, str]:
        """member id -> owner (incarnation) of the live registry entries."""
        with self.redis_client() as r:
            now_s, now_us = r.time()
            now = now_s * 1000 + now_us // 1000
            live = r.zrangebyscore(f"{self.prefix}:{{members}}:expiry", f"({now}", "+inf")
            out = {}
            for m in live:
                data = r.hget(f"{self.prefix}:{{members}}:info", m)
                if data:
                    out[m.decode()] = json.loads(data)["owner"]
            return out

    def check_epochs(self) -> dict[int, int]:
        """RELIABILITY #3 read from the log itself (:meth:`epoch_violations`), asserted.
        Returns partition -> current epoch."""
        epochs, violations = self.epoch_violations()
        assert not violations, violations
        return epochs

    def epoch_violations(self) -> tuple[dict[int, int], list[str]]:
        """In every partition's log: offsets increase, entry epochs never go down along
        offsets, the snapshot's epoch is not above the first entry's, and nothing is above
        the current epoch. Returns (partition -> current epoch, what broke those rules)."""
        epochs = {}
        violations = []
        with self.redis_client() as r:
            for p in range(self.num_partitions):
                base = f"{self.prefix}:{{p{p}}}"
                current = int(r.get(f"{base}:epoch") or 0)
                snap_epoch = r.hget(f"{base}:snap", "epoch")
                previous = int(snap_epoch) if snap_epoch else 0
                last_offset = 0
                for stream_id, fields in r.xrange(f"{base}:log"):
                    offset = int(stream_id.split(b"-")[0])
                    e = int(fields[b"e"])
                    if offset <= last_offset:
                        violations.append(f"partition {p}: offset {offset} after {last_offset}")
                    if e < previous:
                        violations.append(
                            f"partition {p}: offset {offset} written under epoch {e} after an "
                            f"entry under epoch {previous} (a stale writer got through)"
                        )
                    if e > current:
                        violations.append(f"partition {p}: entry epoch {e} > current {current}")
                    previous, last_offset = max(previous, e), offset
                epochs[p] = current
        return epochs, violations

    def expected_map(self, node_ids: list[int] | None = None) -> dict[int, str]:
        ids = node_ids if node_ids is not None else [n for n in self.shards if n not in self.paused]
        return assign(self.num_partitions, [str(n) for n in ids])

    async def wait_settled(self, timeout: float = 60.0) -> dict[int, str]:
        """Until the registry holds exactly the running shards, and every partition's lease
        is held by the shard the map gives it. Returns partition -> node id."""
        deadline = time.monotonic() + timeout
        want_members = {str(n) for n in self.shards if n not in self.paused}
        while True:
            members = await asyncio.to_thread(self.members)
            leases = await asyncio.to_thread(self.leases)
            by_owner = {o: m for m, o in members.items()}
            holders = {p: by_owner.get(lease[0]) if lease else None for p, lease in leases.items()}
            if set(members) == want_members and holders == self.expected_map():
                # the topics the tests commit to (offsets need existing partitions)
                for topic in self.catalog_topics:
                    await asyncio.to_thread(ensure_topic, self.addresses()[0], topic)
                return {p: str(h) for p, h in holders.items()}
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"not settled: members {sorted(members)} (want {sorted(want_members)}), "
                    f"holders {holders}, expected {self.expected_map()}"
                )
            await asyncio.sleep(0.1)

    def shard_log(self, node_id: int) -> str:
        return self.log_path(node_id).read_text(errors="replace")


# ---- committed offsets with a ledger -----------------------------------------------------
@dataclass
class KeyState:
    acked: int = -1
    unknown: list[int] = field(default_factory=list)  # sent since the last ack, no success


class CommitLoad:
    """Writers committing increasing offsets to their own keys (one writer per key, so the
    order of acknowledgements per key is the order of sending)."""

    def __init__(
        self, cluster: Cluster, groups: list[str], writers: int = 6, seed: int = 0
    ) -> None:
        self.cluster = cluster
        self.groups = groups
        self.keys: dict[tuple[str, int], KeyState] = {
            (g, tp): KeyState() for g in groups for tp in range(2)
        }
        self.writers = writers
        self.rng = random.Random(seed)
        self.acked_total = 0
        self.outcomes: Counter[str] = Counter()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def client(self) -> CoordinatorClient:
        return CoordinatorClient(
            self.cluster.addresses(),
            RetryPolicy(attempt_timeout_s=3.0, deadline_s=20.0),
            seed=self.rng.randrange(1 << 30),
        )

    def start(self) -> None:
        self._stop.clear()
        keys = sorted(self.keys)
        self.rng.shuffle(keys)
        shares = [keys[i :: self.writers] for i in range(self.writers)]
        self._tasks = [asyncio.create_task(self._writer(s, i)) for i, s in enumerate(shares)]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)
        self._tasks = []

    async def _writer(self, keys: list[tuple[str, int]], idx: int) -> None:
        rng = random.Random(self.rng.randrange(1 << 30) + idx)
        async with self.client() as client:
            while not self._stop.is_set():
                group, tp = rng.choice(keys)
                state = self.keys[(group, tp)]
                value = max([state.acked, *state.unknown]) + 1 + rng.randint(0, 3)
                state.unknown.append(value)
                request = offsets_pb2.OffsetCommitRequest(
                    group_id=group,
                    topics=[
                        offsets_pb2.OffsetCommitRequestTopic(
                            name="t",
                            partitions=[
                                offsets_pb2.OffsetCommitRequestPartition(
                                    partition_index=tp, committed_offset=value
                                )
                            ],
                        )
                    ],
                )
                try:
                    response = await client.offset_commit(request)
                except grpc.aio.AioRpcError as ex:
                    self.outcomes[ex.code().name] += 1
                    continue  # unknown outcome: stays in `unknown`
                except CoordinatorUnavailableError:
                    self.outcomes["gave up"] += 1
                    continue
                code = response.topics[0].partitions[0].error_code
                self.outcomes[f"code {code}"] += 1
                if code == 0:
                    state.acked, state.unknown = value, []
                    self.acked_total += 1
                await asyncio.sleep(0)

    async def verify(self, timeout_s: float = 60.0) -> int:
        """Every key holds its last acknowledged value or one whose outcome was unknown, and
        every group is served. The stored value becomes the new baseline. Returns the number
        of keys checked."""
        async with CoordinatorClient(
            self.cluster.addresses(), RetryPolicy(attempt_timeout_s=3.0, deadline_s=timeout_s)
        ) as client:
            fetched = await asyncio.gather(
                *(
                    client.offset_fetch(offsets_pb2.OffsetFetchRequestGroup(group_id=g))
                    for g in self.groups
                )
            )
        stored: dict[tuple[str, int], int] = {}
        for g in fetched:
            assert g.error_code == 0, g
            for t in g.topics:
                for p in t.partitions:
                    assert p.error_code == 0, (g.group_id, p)
                    stored[(g.group_id, p.partition_index)] = p.committed_offset
        for key, state in self.keys.items():
            got = stored.get(key, -1)
            allowed = {state.acked, *state.unknown}
            assert got in allowed, (
                f"{key}: stored {got}, last acknowledged {state.acked}, unknown {state.unknown}"
            )
            state.acked, state.unknown = got, []
        return len(self.keys)


# ---- KIP-848 consumer groups -------------------------------------------------------------
@dataclass
class GroupMember:
    group_id: str
    member_id: str
    epoch: int = 0
    owned: dict[str, tuple[int, ...]] = field(default_factory=dict)


class ConsumerGroups:
    def __init__(self, cluster: Cluster, groups: list[str], members_per_group: int = 2) -> None:
        self.cluster = cluster
        self.members = [
            GroupMember(g, f"{g}-m{i}") for g in groups for i in range(members_per_group)
        ]
        self.groups = groups
        self.per_group = members_per_group
        self.events: Counter[str] = Counter()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def create_topic(self) -> None:
        async with grpc.aio.insecure_channel(self.cluster.addresses()[0]) as ch:
            stub = catalog_pb2_grpc.TopicCatalogStub(ch)
            r = await stub.CreateTopics(
                catalog_pb2.CreateTopicsRequest(
                    topics=[catalog_pb2.CreatableTopic(name=TOPIC, num_partitions=TOPIC_PARTITIONS)]
                )
            )
            assert r.topics[0].error_code in (0, 36), r  # 36: TOPIC_ALREADY_EXISTS

    def start(self) -> None:
        self._stop.clear()
        self._tasks = [asyncio.create_task(self._member(m)) for m in self.members]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)
        self._tasks = []

    async def _member(self, m: GroupMember) -> None:
        async with CoordinatorClient(
            self.cluster.addresses(), RetryPolicy(attempt_timeout_s=3.0, deadline_s=10.0)
        ) as client:
            while not self._stop.is_set():
                request = consumer_group_pb2.ConsumerGroupHeartbeatRequest(
                    group_id=m.group_id,
                    member_id=m.member_id,
                    member_epoch=m.epoch,
                    topic_partitions=common_pb2.TopicPartitionsList(
                        topic_partitions=[
                            common_pb2.TopicPartitions(topic_id=t, partitions=ps)
                            for t, ps in sorted(m.owned.items())
                        ]
                    ),
                )
                if m.epoch == 0:
                    request.rebalance_timeout_ms = 10_000
                    request.subscribed_topic_names.CopyFrom(common_pb2.StringList(values=[TOPIC]))
                interval = 0.3
                try:
                    r = await client.consumer_group_heartbeat(request)
                except (CoordinatorUnavailableError, grpc.aio.AioRpcError) as ex:
                    self.events[type(ex).__name__] += 1
                    continue
                if r.error_code == 0:
                    m.epoch = r.member_epoch
                    if r.HasField("assignment"):
                        m.owned = {
                            tp.topic_id: tuple(tp.partitions)
                            for tp in r.assignment.topic_partitions
                        }
                    interval = r.heartbeat_interval_ms / 1000
                    self.events["ok"] += 1
                else:
                    # FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: rejoin, as a Kafka client does
                    self.events[f"code {r.error_code}"] += 1
                    m.epoch, m.owned = 0, {}
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), interval)

    async def wait_stable(self, timeout_s: float = 60.0) -> None:
        """RELIABILITY #7: every group Stable, each member at the group epoch, every topic
        partition owned by exactly one member of its group."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        async with CoordinatorClient(
            self.cluster.addresses(), RetryPolicy(attempt_timeout_s=3.0, deadline_s=10.0)
        ) as client:
            while True:
                ok = True
                for g in self.groups:
                    try:
                        d = await client.consumer_group_describe(g)
                    except CoordinatorUnavailableError as ex:
                        ok, last = False, ex
                        break
                    members = [m for m in self.members if m.group_id == g]
                    owned = Counter(p for m in members for ps in m.owned.values() for p in ps)
                    if (
                        d.error_code != 0
                        or d.group_state != "Stable"
                        or len(d.members) != self.per_group
                        or any(x.member_epoch != d.group_epoch for x in d.members)
                        or any(m.epoch != d.group_epoch for m in members)
                        or sorted(owned) != list(range(TOPIC_PARTITIONS))
                        or any(c != 1 for c in owned.values())
                    ):
                        ok, last = False, (d, [(m.member_id, m.epoch, m.owned) for m in members])
                        break
                if ok:
                    return
                if time.monotonic() > deadline:
                    raise AssertionError(f"consumer groups not Stable in time: {last}")
                await asyncio.sleep(0.2)
