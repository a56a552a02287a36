"""The assignor service with real worker processes (``groupcoord assignor --grpc-port 0``):
replicas killed with SIGKILL and paused with SIGSTOP while shards' clients keep asking,
graceful SIGTERM, the client's event loop staying free during a large assignment, and
``groupcoord dev --assignor-addresses`` computing on the replicas and then in-process.

What must hold: every call gets the assignment the in-process algorithm gives (through a
live replica or the fallback), no call waits much beyond ``attempts x deadline``, and the
fallback is counted.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import signal
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import grpc
import pytest
from groupcoord.v1 import assignor_pb2_grpc

from services.assignor.client import AssignorClientSettings, RemoteAssignor, _encode
from services.assignor.codec import encode_request
from services.shard.assignor_executor import InProcessAssignor
from shards.core.consumer.target_assignment import TargetAssignmentRequest
from tests.component.conftest import Client
from tests.component.test_consumer_group_grpc import (
    Member,
    _check_disjoint_and_complete,
    _converge,
    _create_topic,
)
from tests.support.assignor_specs import (
    large_spec,
    plain,
    random_spec,
    to_request,
    varied_spec,
)
from tests.support.processes import ServerProcess, wait_until

ASSIGNED = re.compile(r"assigned group '([^']*)' epoch (\d+)")
WORKER_ENV = {"GROUPCOORD_LOG_LEVEL": "DEBUG"}  # a line per assignment served


def start_worker(tmp_path: Path, name: str) -> ServerProcess:
    return ServerProcess(
        ["assignor", "--grpc-port", "0", "--shutdown-grace-s", "30"],
        tmp_path / f"{name}.log",
        env=WORKER_ENV,
    )


def served(worker: ServerProcess) -> list[tuple[str, int]]:
    """(group, epoch) of every assignment ``worker`` has served so far (from its log)."""
    return [(g, int(e)) for g, e in ASSIGNED.findall(worker.log_path.read_text())]


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[ServerProcess]]:
    procs = [start_worker(tmp_path, f"worker-{i}") for i in range(2)]
    try:
        yield procs
    finally:
        for p in procs:
            p.resume()  # a SIGSTOPped process takes SIGKILL too, but be tidy
            p.kill()


def client_for(
    workers: list[ServerProcess], fallback: InProcessAssignor, timeout_ms: int = 2_000
) -> RemoteAssignor:
    addresses = tuple(w.grpc_address for w in workers)
    return RemoteAssignor(
        AssignorClientSettings(addresses, timeout_ms=timeout_ms, backoff_ms=20), fallback
    )


def requests(
    big: bool = True,
) -> list[tuple[TargetAssignmentRequest, dict[str, dict[str, tuple[int, ...]]]]]:
    """Requests with their in-process answers (computed once)."""
    local = InProcessAssignor(["uniform", "range"])
    out = []
    for seed, name in itertools.product(range(6), ("uniform", "range")):
        request = to_request(varied_spec(seed), name, f"group-{seed}-{name}", seed + 1)
        out.append((request, plain(local.compute(request))))
    if big:
        request = to_request(large_spec(2_000, 100), "uniform", "big", 7)
        out.append((request, plain(local.compute(request))))
    return out


async def test_assignments_keep_coming_when_replicas_are_killed(
    workers: list[ServerProcess],
) -> None:
    fallback = InProcessAssignor(["uniform", "range"])
    client = client_for(workers, fallback)
    cases = requests()
    answered: list[float] = []
    stop = asyncio.Event()

    async def ask_continuously() -> None:
        for request, expected in itertools.cycle(cases):
            if stop.is_set():
                return
            assert await client(request) == expected, request.group_id
            answered.append(time.monotonic())

    askers = [asyncio.ensure_future(ask_continuously()) for _ in range(3)]
    try:
        # Both replicas serve (round robin) ...
        await _until(lambda: all(len(served(w)) >= 5 for w in workers), askers)
        assert client.stats["fallbacks"] == 0, client.stats

        # ... one is killed mid-stream: assignments keep coming, from the other one.
        survivor_before = len(served(workers[1]))
        workers[0].kill()
        killed_at = time.monotonic()
        await _until(lambda: sum(t > killed_at for t in answered) >= 30, askers)
        assert len(served(workers[1])) >= survivor_before + 20
        remote_after_one_kill = client.stats["remote_ok"]

        # ... both killed: the fallback answers, and the counter moves.
        fallbacks_before = client.stats["fallbacks"]
        workers[1].kill()
        both_at = time.monotonic()
        await _until(lambda: sum(t > both_at for t in answered) >= 10, askers)
        await _until(lambda: client.stats["fallbacks"] >= fallbacks_before + 10, askers)
        assert client.stats["fallbacks.unavailable"] >= 10
        assert client.stats["failures.UNAVAILABLE"] >= 10
        assert client.stats["remote_ok"] <= remote_after_one_kill + 3  # calls already in flight
    finally:
        stop.set()
        await asyncio.gather(*askers)  # re-raises a wrong answer
        await client.close()
    assert client.stats["calls"] == client.stats["remote_ok"] + client.stats["fallbacks"]


async def _until(
    predicate: Callable[[], bool], tasks: Sequence[asyncio.Future[None]], timeout: float = 60.0
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        for t in tasks:
            if t.done():
                t.result()  # a failed asker fails the test now
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(0.02)


async def test_a_paused_replica_holds_no_caller_beyond_the_deadline(
    workers: list[ServerProcess],
) -> None:
    timeout_s = 0.8
    client = RemoteAssignor(
        AssignorClientSettings(
            tuple(w.grpc_address for w in workers),
            timeout_ms=int(timeout_s * 1000),
            backoff_ms=20,
            keepalive_ms=1_000,
            keepalive_timeout_ms=500,
        ),
        InProcessAssignor(["uniform", "range"]),
    )
    cases = requests(big=False)

    async def ask() -> float:
        request, expected = cases[len(durations) % len(cases)]
        t0 = time.monotonic()
        assert await client(request) == expected
        durations.append(time.monotonic() - t0)
        return durations[-1]

    durations: list[float] = []
    try:
        # Connected to both first: a paused replica then keeps a READY connection, and round
        # robin keeps sending it calls -- until the keepalive pings find it out.
        for _ in cases:
            await ask()
        assert all(served(w) for w in workers)

        workers[0].pause()
        paused_at = time.monotonic()
        durations.clear()
        while time.monotonic() - paused_at < 3.0:
            # at most one attempt cut by its deadline (or by the keepalive), one backoff
            # (<= 20 ms), and the real work on the live replica
            assert await ask() < timeout_s + 0.5, durations
        hit = client.stats["failures.DEADLINE_EXCEEDED"] + client.stats["failures.UNAVAILABLE"]
        assert hit >= 1, client.stats
        assert client.stats["fallbacks"] == 0  # each retry went to the live replica

        # The keepalive has taken the paused replica out of the rotation: no call waits.
        for _ in range(10):
            assert await ask() < timeout_s / 2, durations
        assert (
            client.stats["failures.DEADLINE_EXCEEDED"] + client.stats["failures.UNAVAILABLE"] == hit
        ), client.stats

        # Both paused: the fallback answers, within attempts x deadline.
        workers[1].pause()
        elapsed = await ask()
        assert elapsed < client.settings.attempts * timeout_s + 0.5, elapsed
        assert client.stats["fallbacks.unavailable"] == 1
    finally:
        for w in workers:
            w.resume()
        await client.close()


async def test_the_client_never_blocks_the_event_loop(tmp_path: Path) -> None:
    """While a 10 000-member assignment is pending -- encoded, computed remotely, decoded;
    then computed by the fallback -- a ticker on the same loop keeps ticking. The spec is the
    heaviest to encode (every member its own 50 of 1000 topics: ~100 ms to encode, ~50 ms
    to decode, ~0.5 s to assign), so work done on the loop would show as a long stall."""
    request = to_request(random_spec(), "uniform", "huge", 1)
    t0 = time.perf_counter()
    expected = plain(InProcessAssignor(["uniform"]).compute(request))
    inline_compute = time.perf_counter() - t0
    t0 = time.perf_counter()
    _encode(request)
    inline_encode = time.perf_counter() - t0
    # Done on the loop, encoding alone would stall it for `inline_encode` (~100 ms) and the
    # fallback for `inline_compute` (~0.6 s). On worker threads, the loop waits at most for
    # the longest single C call of the work (measured: ~10 ms for the client's own code,
    # 20-40 ms inside the algorithm) -- plus whatever else the machine is doing, so each
    # path gets up to three tries (a stall caused by the work happens every time; one
    # caused by a busy machine does not).
    bounds = {
        "remote": max(0.06, 0.6 * inline_encode),
        "fallback": max(0.1, 0.3 * inline_compute),
    }
    with start_worker(tmp_path, "worker") as worker:
        client = client_for([worker], InProcessAssignor(["uniform"]), timeout_ms=30_000)
        try:
            await client(request)  # warm: connection, imports
            remote = await _least_lag(client, request, expected, bounds["remote"])
            assert client.stats["fallbacks"] == 0
            worker.kill()
            fallback = await _least_lag(client, request, expected, bounds["fallback"])
            assert client.stats["fallbacks"] >= 1
        finally:
            await client.close()
    for label, (duration, lags) in (("remote", remote), ("fallback", fallback)):
        print(
            f"{label}: call {duration * 1e3:.0f} ms, {len(lags)} ticks, loop lag median "
            f"{statistics.median(lags) * 1e3:.1f} ms, max {max(lags) * 1e3:.1f} ms "
            f"(inline encode {inline_encode * 1e3:.0f} ms, compute {inline_compute * 1e3:.0f} ms)"
        )
        assert duration > 0.3, (label, duration)
        assert max(lags) < bounds[label], (label, duration, max(lags), bounds[label])
        assert statistics.median(lags) < 0.02, (label, statistics.median(lags))


async def _least_lag(
    client: RemoteAssignor, request: TargetAssignmentRequest, expected: object, bound: float
) -> tuple[float, list[float]]:
    best: tuple[float, list[float]] | None = None
    for _ in range(3):
        duration, lags = await _lag_during(client, request, expected)
        if best is None or max(lags) < max(best[1]):
            best = (duration, lags)
        if max(lags) < bound:
            break
    assert best is not None
    return best


async def _lag_during(
    client: RemoteAssignor, request: TargetAssignmentRequest, expected: object
) -> tuple[float, list[float]]:
    interval = 0.002
    lags: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        while not done.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(interval)
            lags.append(time.perf_counter() - t0 - interval)

    ticker = asyncio.ensure_future(tick())
    await asyncio.sleep(0.01)
    t0 = time.perf_counter()
    answer = await client(request)
    duration = time.perf_counter() - t0
    done.set()
    await ticker
    assert answer == expected
    return duration, lags


async def test_sigterm_finishes_the_assignment_in_flight(tmp_path: Path) -> None:
    worker = start_worker(tmp_path, "worker")
    spec = large_spec()
    try:
        async with grpc.aio.insecure_channel(worker.grpc_address) as channel:
            stub = assignor_pb2_grpc.AssignorStub(channel)
            in_flight = asyncio.ensure_future(
                stub.Assign(encode_request("uniform", spec, "in-flight", 3), timeout=60)
            )
            await asyncio.to_thread(
                wait_until, lambda: "assigning group 'in-flight'" in _log(worker), 30, 0.002
            )
            worker.proc.send_signal(signal.SIGTERM)
            response = await in_flight
            assert len(response.assignment.topic_counts) == len(spec.members)
            assert await asyncio.to_thread(worker.proc.wait, 30) == 0  # a graceful exit
    finally:
        worker.kill()
    log = _log(worker)
    # received, SIGTERM, answered, stopped -- in that order
    order = [
        log.index("assigning group 'in-flight'"),
        log.index("assignor stopping"),
        log.index("assigned group 'in-flight'"),
        log.index("assignor stopped"),
    ]
    assert order == sorted(order), log


def _log(worker: ServerProcess) -> str:
    return worker.log_path.read_text()


async def test_dev_computes_on_the_replicas_then_in_process(
    workers: list[ServerProcess], tmp_path: Path
) -> None:
    addresses = ",".join(w.grpc_address for w in workers)
    with ServerProcess(
        [
            "dev",
            "--grpc-port",
            "0",
            "--data-dir",
            str(tmp_path / "data"),
            "--num-partitions",
            "4",
            # every target off the loop (small groups are otherwise assigned in the heartbeat)
            "--set",
            "consumer_group_inline_assignment_max_size=0",
        ],
        tmp_path / "dev.log",
        env={"GROUPCOORD_ASSIGNOR_ADDRESSES": addresses, "GROUPCOORD_ASSIGNOR_TIMEOUT_MS": "1000"},
    ) as dev:
        client = await _connect(dev)
        try:
            topic_id = await _create_topic(client)
            members = [Member(f"member-{i}") for i in range(3)]
            await _converge(client, members, rounds=200)
            _check_disjoint_and_complete(members, topic_id, 12)
            assert sum(len(served(w)) for w in workers) >= 1
            assert "computing in-process" not in dev.log_path.read_text()

            for w in workers:
                w.kill()
            members.append(Member("member-3"))
            await _converge(client, members, rounds=300)
            _check_disjoint_and_complete(members, topic_id, 12)
            assert "assignor service unavailable" in dev.log_path.read_text()
        finally:
            await client.channel.close()
        assert dev.terminate() == 0


async def _connect(process: ServerProcess) -> Client:
    from groupcoord.v1 import catalog_pb2_grpc, coordinator_pb2_grpc

    channel = grpc.aio.insecure_channel(process.grpc_address)
    return Client(
        None,  # type: ignore[arg-type]
        channel,
        coordinator_pb2_grpc.GroupCoordinatorStub(channel),
        catalog_pb2_grpc.TopicCatalogStub(channel),
    )
