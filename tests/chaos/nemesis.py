"""One nemesis run: three real ``groupcoord shard`` processes on a private Redis, the workloads
of :mod:`tests.chaos.workloads` recording a history, one fault (or two at once) injected
mid-load, then the checker of :mod:`tests.chaos.checker` over the history, the final state
and the store's logs.

The victim is always node 0. Every client's bootstrap list starts with it, as a client
configured with that shard first would be: what the victim answers to FindCoordinator
decides whether such a client gets away from it. For the partitions (``cut-*``) node 0 runs
in a network namespace the run makes (:mod:`tests.support.netns`); the others and the store
stay on the host (the store also listens on the host's end of the veth).

Faults (:data:`FAULTS`; ``lease`` is ``--lease-ms``, 1.5 s by default):

* ``kill`` -- kill -9 of node 0, restarted at the same port after lease + 2 s;
* ``pause-short`` -- SIGSTOP of node 0 for half a lease (it must lose nothing);
* ``pause-long`` -- SIGSTOP for 2.5 leases + 1 s, twice: its partitions move; reads sent
  straight to it while it is stopped (a client with a cached route) are answered when it
  resumes and must not be stale;
* ``cut-store`` -- node 0 ↔ Redis dropped for 3 leases: its partitions move; clients must
  reach the new owners within lease + 2 s although node 0 is first in their lists;
* ``cut-client`` -- the host's clients ↔ node 0 dropped (node 0 still renews its leases);
* ``cut-gateway`` -- the same cut, the workload going through a ``groupcoord gateway``
  (Kafka protocol) in front of the shards;
* ``store-kill`` -- kill -9 of Redis, restarted with the same port and data after 2 s;
* ``store-pause`` -- SIGSTOP of Redis for 2 leases;
* ``clock-skew`` -- node 0 stops gracefully (hand-off) and comes back with its wall clock
  8 days ahead (libfaketime), taking its partitions back; offsets retention is 1 day,
  checked every second;
* ``double`` -- ``cut-store`` of node 0 and kill -9 of node 1 at the same moment;
* ``double-store`` -- kill -9 of Redis and of node 1 at the same moment; Redis restarted
  after 2 s, node 1 not: the two others, which keep their last view of the members for one
  lease after the outage, must still serve node 1's partitions within lease + 2 s of the
  store's return.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import json
import random
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from groupcoord.v1 import coordinator_pb2_grpc, groups_pb2

from loadtest.kafka_client import KafkaCoordinatorClient
from services.client import CoordinatorClient, RetryPolicy
from tests.chaos.checker import VIOLATIONS, Report, check_run
from tests.chaos.history import History
from tests.chaos.workloads import (
    GroupMembers,
    OffsetReader,
    OffsetWriter,
    fetch_request,
    key_name,
    pinned_fetches,
)
from tests.integration.multishard.cluster import Cluster, groups_for_partitions
from tests.support.metrics import scrape
from tests.support.netns import NetNamespace
from tests.support.processes import ServerProcess, gateway_process
from tests.support.redis_server import LocalRedisServer

SHARDS = 3
NUM_PARTITIONS = 12
LEASE_MS = 1500
#: the clients' policy: a shard that does not answer within a second is treated as gone
CLIENT_POLICY = RetryPolicy(attempt_timeout_s=1.0, deadline_s=5.0)
#: how far ahead the skewed shard's wall clock runs, and the retention it must not apply
SKEW = "+8d"
SKEW_S = 8 * 86400
RETENTION_MINUTES = 1440


def faketime_library() -> str | None:
    """libfaketime (Debian's ``faketime`` package), or None."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    return found[0] if found else None


def faketime_env(offset: str) -> dict[str, str]:
    """What ``faketime -f OFFSET`` sets, without its wrapper process: the wrapper forks and
    waits, so kill -9 of its pid would leave the shard running. Only the wall clock moves:
    the monotonic clock (leases, timeouts) is the machine's, as after an NTP step."""
    library = faketime_library()
    assert library is not None, "faketime is not installed"
    return {
        "LD_PRELOAD": library,
        "FAKETIME": offset,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_NO_CACHE": "1",
    }


@dataclass(frozen=True)
class Fault:
    name: str
    inject: Callable[[Run], Awaitable[None]]
    #: node 0 in a network namespace
    netns: bool = False
    #: the workload goes through a gateway (Kafka protocol)
    gateway: bool = False
    #: the recovery target counts from the fault's "start" (the shards must route around
    #: it) or its "end" (nothing can serve during it: the store is down, or the clients
    #: are cut from the live owner)
    recovery_from: str = "start"
    describe: str = ""

    def recovery_target_s(self, lease_s: float) -> float:
        """Issue 35's target: lease + 2 s (of the fault's start or end, see
        ``recovery_from``), for every fault, the store's own included."""
        return lease_s + 2


@dataclass
class Run:
    workdir: Path
    fault: Fault
    seed: int
    lease_ms: int
    history: History
    redis: LocalRedisServer
    cluster: Cluster
    netns: NetNamespace | None = None
    gateway: ServerProcess | None = None
    clients: list[Any] = field(default_factory=list)
    #: offsets partition -> the group of the key committed all along on it
    active: dict[int, str] = field(default_factory=dict)
    #: what the fault measured, for the result
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def lease_s(self) -> float:
        return self.lease_ms / 1000

    async def hold(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    #: the fault's repetition within the run (a fault injected twice: ``name#2``)
    cycle: int = 1

    @property
    def fault_name(self) -> str:
        return self.fault.name if self.cycle == 1 else f"{self.fault.name}#{self.cycle}"

    def start(self, **detail: Any) -> None:
        self.history.fault(self.fault_name, "start", **detail)

    def end(self, **detail: Any) -> None:
        self.history.fault(self.fault_name, "end", **detail)


# ---- the faults ----------------------------------------------------------------------------
async def _kill(run: Run) -> None:
    run.start(node=0)
    await asyncio.to_thread(run.cluster.kill, 0)
    await run.hold(run.lease_s + 2)
    await asyncio.to_thread(run.cluster.start, 0)
    run.end(node=0)


async def _pause(run: Run, seconds: float) -> None:
    run.start(node=0, seconds=seconds)
    await asyncio.to_thread(run.cluster.pause, 0)
    await run.hold(seconds)
    await asyncio.to_thread(run.cluster.resume, 0)
    run.end(node=0)


async def _pause_short(run: Run) -> None:
    await _pause(run, run.lease_s / 2)


async def _pause_long(run: Run) -> None:
    """Twice (the map settled in between): reads pinned to node 0, of the keys being
    committed on the partitions it holds, are sent from one lease + 1 s into the pause (its
    partitions have moved and the writers have been acknowledged by the new owners) until it
    resumes. On resume the shard races its own overdue lease renewal against the queued
    reads (today's code loses that race about two times in three): every read, and every
    pause, is a chance to lose it."""
    for cycle in (1, 2):
        run.cycle = cycle
        await _pause_long_once(run)
        if cycle == 1:
            await run.cluster.wait_settled()
            await run.hold(run.lease_s)


async def _pause_long_once(run: Run) -> None:
    pause_s = run.lease_s * 2.5 + 1
    owner = (await asyncio.to_thread(run.cluster.members))["0"]
    leases = await asyncio.to_thread(run.cluster.leases)
    held = sorted(p for p, lease in leases.items() if lease is not None and lease[0] == owner)
    assert held, "node 0 holds no partition"
    keys = {run.active[p]: [0] for p in held}
    run.extra.setdefault("pinned_groups", []).append(sorted(keys))
    address = run.cluster.shards[0].grpc_address
    async with grpc.aio.insecure_channel(address) as channel:
        # connected before the pause: what is sent during it waits in the shard's socket
        stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        await stub.FindCoordinator(groups_pb2.FindCoordinatorRequest(coordinator_keys=["x"]))
        pause = asyncio.create_task(_pause(run, pause_s))
        await asyncio.sleep(run.lease_s + 1)
        window = pause_s - run.lease_s - 1.2
        await pinned_fetches(
            run.history,
            stub,
            keys,
            count=max(1, int(window / 0.05)),
            interval_s=0.05,
            timeout_s=pause_s + 10,
        )
        await pause


async def _cut_store(run: Run) -> None:
    assert run.netns is not None
    run.start(node=0, link="shard-store")
    await asyncio.to_thread(run.netns.cut_remote, run.redis.port)
    await run.hold(run.lease_s * 3)
    await asyncio.to_thread(run.netns.heal)
    run.end(node=0)


async def _cut_client(run: Run) -> None:
    assert run.netns is not None
    run.start(node=0, link="gateway-shard" if run.fault.gateway else "client-shard")
    await asyncio.to_thread(run.netns.cut_local, run.cluster.shards[0].grpc_port)
    # 3 leases: a dropped TCP connection is retried by the kernel at 0.2, 0.6, 1.4, 3.0,
    # 6.2 s...; gRPC channels without keepalive wait for that retransmission after the heal,
    # so a cut that ends just after one (2.5 leases = 3.75 s) costs ~2.5 s more than this one
    await run.hold(run.lease_s * 3)
    await asyncio.to_thread(run.netns.heal)
    run.end(node=0)


async def _store_kill(run: Run) -> None:
    run.start()
    await asyncio.to_thread(run.redis.kill)
    await run.hold(2)
    await asyncio.to_thread(run.redis.start)
    run.end()


async def _store_pause(run: Run) -> None:
    run.start()
    await asyncio.to_thread(run.redis.pause)
    await run.hold(run.lease_s * 2)
    await asyncio.to_thread(run.redis.resume)
    run.end()


async def _clock_skew(run: Run) -> None:
    run.start(node=0, skew=SKEW)
    code = await asyncio.to_thread(run.cluster.terminate, 0)
    run.extra["terminate_exit"] = code
    run.cluster.node_env[0] = faketime_env(SKEW)
    run.cluster.node_args[0] = ["--metrics-port", "0"]
    proc = await asyncio.to_thread(run.cluster.start, 0)
    await run.cluster.wait_settled()
    # several retention checks on the skewed owner
    await run.hold(2)
    run.end(node=0)
    assert proc.metrics_url is not None
    run.extra["clock_offset_seconds"] = await asyncio.to_thread(
        _metric, proc.metrics_url, "groupcoord_clock_offset_seconds"
    )


def _metric(url: str, name: str) -> float | None:
    found = scrape(url)
    return found.value(name) if found.has(name) else None


async def _double(run: Run) -> None:
    assert run.netns is not None
    run.start(nodes=[0, 1], what="shard-store cut of node 0 + kill -9 of node 1")
    await asyncio.gather(
        asyncio.to_thread(run.netns.cut_remote, run.redis.port),
        asyncio.to_thread(run.cluster.kill, 1),
    )
    await run.hold(run.lease_s * 3)
    await asyncio.to_thread(run.netns.heal)
    await asyncio.to_thread(run.cluster.start, 1)
    run.end(nodes=[0, 1])


async def _double_store(run: Run) -> None:
    run.start(nodes=[1], what="kill -9 of Redis + kill -9 of node 1 (not restarted)")
    await asyncio.gather(
        asyncio.to_thread(run.redis.kill),
        asyncio.to_thread(run.cluster.kill, 1),
    )
    await run.hold(2)
    await asyncio.to_thread(run.redis.start)
    run.end(nodes=[1])


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault("kill", _kill, describe="kill -9 of a shard, restarted after lease + 2 s"),
        Fault("pause-short", _pause_short, describe="SIGSTOP of a shard for lease / 2"),
        Fault(
            "pause-long",
            _pause_long,
            describe="SIGSTOP of a shard for 2.5 leases + 1 s, reads queued on it",
        ),
        Fault("cut-store", _cut_store, netns=True, describe="shard ↔ Redis dropped, 3 leases"),
        Fault(
            "cut-client",
            _cut_client,
            netns=True,
            recovery_from="end",
            describe="clients ↔ shard dropped, 3 leases",
        ),
        Fault(
            "cut-gateway",
            _cut_client,
            netns=True,
            gateway=True,
            recovery_from="end",
            describe="gateway ↔ shard dropped, 3 leases (Kafka clients via the gateway)",
        ),
        Fault(
            "store-kill",
            _store_kill,
            recovery_from="end",
            describe="kill -9 of Redis, restarted after 2 s",
        ),
        Fault(
            "store-pause",
            _store_pause,
            recovery_from="end",
            describe="SIGSTOP of Redis for 2 leases",
        ),
        Fault(
            "clock-skew",
            _clock_skew,
            describe=f"a shard restarted with its clock {SKEW} takes its partitions back",
        ),
        Fault(
            "double",
            _double,
            netns=True,
            describe="shard ↔ Redis cut of one shard + kill -9 of another",
        ),
        Fault(
            "double-store",
            _double_store,
            recovery_from="end",
            describe="kill -9 of Redis + kill -9 of a shard that stays down",
        ),
    )
}


def unavailable_reason(fault: Fault) -> str | None:
    """Why ``fault`` cannot run on this machine (None: it can)."""
    if fault.name == "clock-skew" and (
        shutil.which("faketime") is None or faketime_library() is None
    ):
        return "faketime (libfaketime) is not installed: scripts/test installs it"
    if fault.netns:
        try:
            NetNamespace.create().close()
        except Exception as ex:
            return f"network namespaces refused: {ex}"
    return None


# ---- one run -------------------------------------------------------------------------------
@dataclass
class RunResult:
    fault: str
    seed: int
    report: Report
    recovery_from: str
    #: the recovery this fault must stay within (:meth:`Fault.recovery_target_s`)
    target_s: float
    extra: dict[str, Any]
    history_path: Path
    seconds: float
    #: the history's events (also in ``history_path``)
    events: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def late(self) -> bool:
        return self.recovery_s > self.target_s

    @property
    def recovery_s(self) -> float:
        if self.recovery_from == "start":
            return self.report.max_recovery_from_start
        return self.report.max_recovery_from_end

    def as_dict(self) -> dict[str, Any]:
        return {
            "fault": self.fault,
            "seed": self.seed,
            **self.report.counts(),
            "recovery_from": self.recovery_from,
            "recovery_s": seconds(self.recovery_s),
            "recovery_target_s": self.target_s,
            "recovery": self.report.recovery,
            "extra": self.extra,
            "history": str(self.history_path),
            "seconds": round(self.seconds, 1),
        }


def seconds(value: float) -> float | str:
    """A duration for the tables: "never" when a client never got an answer again."""
    return round(value, 2) if value != float("inf") else "never"


def _client(fault: Fault, bootstrap: list[str], seed: int) -> Any:
    if fault.gateway:
        return KafkaCoordinatorClient(bootstrap, CLIENT_POLICY, seed=seed)
    return CoordinatorClient(bootstrap, CLIENT_POLICY, seed=seed)


async def _final_values(cluster: Cluster, keys: dict[str, list[int]]) -> dict[str, int]:
    """Every key as a healthy cluster answers it at the end (retried until it does)."""
    values: dict[str, int] = {}
    policy = RetryPolicy(attempt_timeout_s=3.0, deadline_s=30.0)
    async with CoordinatorClient(cluster.addresses(), policy) as client:
        for group, partitions in sorted(keys.items()):
            answer = await client.offset_fetch(fetch_request(group, partitions))
            assert answer.error_code == 0, answer
            for t in answer.topics:
                for p in t.partitions:
                    assert p.error_code == 0, (group, p)
                    values[key_name(group, p.partition_index)] = p.committed_offset
    return values


async def run_fault(
    name: str,
    workdir: Path,
    *,
    seed: int = 0,
    load_s: float = 1.5,
    after_s: float | None = None,
    lease_ms: int = LEASE_MS,
) -> RunResult:
    """Run fault ``name`` once under load: ``load_s`` of load before it, ``after_s`` (default
    the fault's recovery target + 1 s) after it; returns the checked result (the history is
    in ``workdir``)."""
    fault = FAULTS[name]
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    history = History(workdir / "history.jsonl")
    netns = await asyncio.to_thread(NetNamespace.create) if fault.netns else None
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    members: GroupMembers | None = None
    cluster: Cluster | None = None
    redis = LocalRedisServer(workdir / "redis", bind=[netns.host_ip] if netns else [])
    run: Run | None = None
    try:
        await asyncio.to_thread(redis.start)
        config = (
            "consumer_group_heartbeat_interval_ms=300,consumer_group_min_heartbeat_interval_ms=100,"
            "consumer_group_session_timeout_ms=20000,consumer_group_min_session_timeout_ms=1000,"
            "offsets_retention_check_interval_ms=1000"
        )
        cluster = Cluster(
            workdir,
            redis,
            num_partitions=NUM_PARTITIONS,
            lease_ms=lease_ms,
            config=config,
            extra_args=["--offsets-retention-minutes", str(RETENTION_MINUTES)],
            netns={0: netns} if netns else {},
        )
        await asyncio.gather(*(asyncio.to_thread(cluster.start, n) for n in range(SHARDS)))
        await cluster.wait_settled()
        run = Run(workdir, fault, seed, lease_ms, history, redis, cluster, netns)
        addresses = cluster.addresses()  # node 0 first
        bootstrap = addresses
        if fault.gateway:
            run.gateway = await asyncio.to_thread(
                gateway_process, ",".join(addresses), NUM_PARTITIONS, workdir / "gateway.log"
            )
            bootstrap = [f"127.0.0.1:{run.gateway.ports['kafka']}"]

        # per offsets partition (so that the victim holds some of each): one key committed
        # all along, and one idle key committed a few times at the start
        groups = groups_for_partitions(f"w{seed}", NUM_PARTITIONS, 1)
        idle = groups_for_partitions(f"i{seed}", NUM_PARTITIONS, 1)
        keys = {g: [0] for g in [*groups, *idle]}
        run.active = dict(enumerate(groups))  # groups_for_partitions: partition order
        writers = []
        for i, g in enumerate([*groups, *idle]):
            client = _client(fault, bootstrap, rng.randrange(1 << 30))
            run.clients.append(client)
            limit = 3 if g in idle else None
            seed_w = rng.randrange(1 << 30)
            writers.append(OffsetWriter(history, f"w{i}", client, g, 0, seed=seed_w, limit=limit))
        readers = []
        for i in range(2):
            client = _client(fault, bootstrap, rng.randrange(1 << 30))
            run.clients.append(client)
            readers.append(OffsetReader(history, f"r{i}", client, keys))
        member_clients = [_client(fault, bootstrap, rng.randrange(1 << 30)) for _ in range(2)]
        run.clients += member_clients
        members = GroupMembers(
            history,
            member_clients,
            wire="kafka" if fault.gateway else "grpc",
            run_id=f"m{seed}",
        )
        await members.start(bootstrap)
        tasks = [asyncio.create_task(w.run(stop)) for w in writers]
        tasks += [asyncio.create_task(r.run(stop)) for r in readers]
        await asyncio.sleep(load_s)

        await fault.inject(run)
        # long enough for the slowest client to come back within the target
        target_s = fault.recovery_target_s(run.lease_s)
        await asyncio.sleep(after_s if after_s is not None else target_s + 1)
        stop.set()
        await asyncio.gather(*tasks)
        await members.stop()
        members = None
        await cluster.wait_settled()
        final = await _final_values(cluster, keys)
        _, epoch_violations = await asyncio.to_thread(cluster.epoch_violations)
        history.close()
        logs = [cluster.log_path(n).read_text(errors="replace") for n in range(SHARDS)]
        report = check_run(history.events, final, epoch_violations, logs)
        extra = dict(run.extra)
        return RunResult(
            name,
            seed,
            report,
            fault.recovery_from,
            target_s,
            extra,
            workdir / "history.jsonl",
            time.monotonic() - started,
            history.events,
        )
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        if members is not None:
            for m in members.members:
                with contextlib.suppress(Exception):
                    await m.vanish()
        if run is not None:
            await asyncio.gather(*(c.close() for c in run.clients), return_exceptions=True)
            if run.gateway is not None:
                await asyncio.to_thread(run.gateway.kill)
        if netns is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(netns.heal)
        if cluster is not None:
            await asyncio.to_thread(cluster.close)
        await asyncio.to_thread(redis.stop)
        if netns is not None:
            await asyncio.to_thread(netns.close)
        history.close()


def table(results: list[RunResult]) -> list[dict[str, Any]]:
    """One row per fault: runs, ops, and the checker's counts summed (recovery: the max)."""
    rows: dict[str, dict[str, Any]] = {}
    for r in results:
        c = r.report.counts()
        row = rows.setdefault(
            r.fault,
            {
                "fault": r.fault,
                "runs": 0,
                "ops": 0,
                **dict.fromkeys(VIOLATIONS, 0),
                "max_recovery_s": 0.0,
                "target_s": r.target_s,
                "recovery_from": r.recovery_from,
            },
        )
        row["runs"] += 1
        for k in ("ops", *VIOLATIONS):
            row[k] += c[k]
        row["max_recovery_s"] = max(row["max_recovery_s"], r.recovery_s)
    for row in rows.values():
        row["max_recovery_s"] = seconds(row["max_recovery_s"])
    return list(rows.values())


def format_table(rows: list[dict[str, Any]]) -> str:
    cols = ["fault", "runs", "ops", *VIOLATIONS, "max_recovery_s", "target_s", "recovery_from"]
    width = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    lines = ["  ".join(c.rjust(width[c]) for c in cols)]
    lines += ["  ".join(str(r[c]).rjust(width[c]) for c in cols) for r in rows]
    return "\n".join(lines)


def save(results: list[RunResult], path: Path, meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"meta": meta, "table": table(results), "runs": [r.as_dict() for r in results]}
    path.write_text(json.dumps(body, indent=1, default=str) + "\n")
