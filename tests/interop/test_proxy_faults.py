"""Proxy mode under faults, with real processes: ``groupcoord dev --upstream-bootstrap``.

* The upstream is unreachable at start-up: the process starts, logs the outage once (no
  traceback per retry), and its gRPC health says NOT_SERVING for "" and
  ``groupcoord.Gateway`` (the group services stay SERVING) until the upstream -- an Apache
  Kafka started later on that port -- has answered; then SERVING, and Kafka clients work
  through the gateway. Without an upstream (coordinator-only mode) everything is SERVING once
  started.
* An upstream broker that leads partitions is killed (SIGKILL) in a 2-broker cluster, topic
  replication factor 2: a confluent-kafka producer (acks=all) and a KIP-848 consumer, both
  through the gateway, keep working (the dead broker's gateway listener closes the
  connections, the clients refresh metadata and go to the new leader's listener); the broker
  restarts and rejoins; every record acknowledged to the producer is consumed, and the
  committed offsets equal the end offsets.

(A malformed upstream response closing that client connection only is covered by
tests/component/test_gateway_proxy.py with a fake upstream.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from groupcoord.v1 import consumer_group_pb2, coordinator_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.gateway.app import HEALTH_SERVICE
from tests.interop.clients import QUIET, committed_offsets
from tests.interop.kafka_broker import (
    KafkaBroker,
    KafkaUnavailable,
    free_port,
    groupcoord_args,
    unavailable_reason,
)
from tests.interop.kafka_cluster import KafkaCluster
from tests.interop.support import unique
from tests.support.processes import ServerProcess

pytestmark = [pytest.mark.interop, pytest.mark.slow]

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
GROUP_SERVICES = ("groupcoord.v1.GroupCoordinator", "groupcoord.v1.TopicCatalog")


@pytest.fixture(autouse=True)
def _kafka_available() -> None:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)


def _dev(tmp: Path, upstream: str | None) -> ServerProcess:
    upstream_args = ["--upstream-bootstrap", upstream] if upstream else []
    return ServerProcess.dev(tmp, *upstream_args, *groupcoord_args())


@pytest.fixture
def processes() -> Iterator[list[Any]]:
    """Whatever a test starts (ServerProcess, KafkaBroker, KafkaCluster), stopped at the end
    in reverse order."""
    started: list[Any] = []
    try:
        yield started
    finally:
        for p in reversed(started):
            if isinstance(p, ServerProcess):
                p.kill()
            else:
                p.stop()


def _health(address: str, service: str) -> Any:
    """The health status of ``service``, or the gRPC status code if the check fails."""
    with grpc.insecure_channel(address) as channel:
        try:
            return (
                health_pb2_grpc.HealthStub(channel)
                .Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
                .status
            )
        except grpc.RpcError as ex:
            return ex.code()


def _group_epoch(address: str, group: str) -> int:
    with grpc.insecure_channel(address) as channel:
        response = coordinator_pb2_grpc.GroupCoordinatorStub(channel).ConsumerGroupDescribe(
            consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=[group]), timeout=10
        )
    [described] = response.groups
    assert described.error_code == 0 and described.group_state == "Stable", described
    return int(described.group_epoch)


def _wait(predicate: Any, timeout: float, what: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def test_coordinator_only_health_is_unchanged(tmp_path: Path, processes: list[Any]) -> None:
    proc = _dev(tmp_path, None)
    processes.append(proc)
    for service in ("", *GROUP_SERVICES):
        assert _health(proc.grpc_address, service) == SERVING, service
    # its built-in gateway (on the Kafka port) needs no upstream: ready at once
    assert _health(proc.grpc_address, HEALTH_SERVICE) == SERVING
    # a stand-alone gateway with a health port: ready once started
    (tmp_path / "gw").mkdir()
    gateway = ServerProcess(
        ["gateway", "--shard-address", proc.grpc_address, "--kafka-port", "0"]
        + ["--health-port", "0", "--num-partitions", groupcoord_args()[1]],
        tmp_path / "gw" / "gateway.log",
    )
    processes.append(gateway)
    _wait(lambda: "grpc" in gateway.ports, 10, "the gateway's health port")
    _wait(
        lambda: all(_health(gateway.grpc_address, n) == SERVING for n in ("", HEALTH_SERVICE)),
        10,
        "the gateway's health SERVING",
    )


def test_upstream_unreachable_at_start_up(tmp_path: Path, processes: list[Any]) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    port = free_port()  # nothing listens here (yet)
    proc = _dev(tmp_path, f"127.0.0.1:{port}")
    processes.append(proc)
    address = proc.grpc_address
    log_path = tmp_path / "server.log"
    # and a stand-alone gateway in front of the same (absent) upstream, with a health port
    (tmp_path / "gw").mkdir()
    gateway = ServerProcess(
        [
            "gateway",
            "--shard-address",
            address,
            "--kafka-port",
            "0",
            "--health-port",
            "0",
            "--num-partitions",
            groupcoord_args()[1],
            "--upstream-bootstrap",
            f"127.0.0.1:{port}",
        ],
        tmp_path / "gw" / "gateway.log",
    )
    processes.append(gateway)
    _wait(lambda: "grpc" in gateway.ports, 10, "the gateway's health port")
    gateway_health = gateway.grpc_address

    # A Kafka client started before the upstream: told the group APIs only (the others
    # need the upstream's versions); it must work once the upstream answers.
    early = AdminClient({"bootstrap.servers": f"127.0.0.1:{proc.ports['kafka']}", **QUIET})
    early.poll(1)  # (it connects to the bootstrap listener in the background)

    # Started; not ready as a gateway, the group services are.
    for service in ("", HEALTH_SERVICE):
        assert _health(address, service) == NOT_SERVING, service
        assert _health(gateway_health, service) == NOT_SERVING, service
    for service in GROUP_SERVICES:
        assert _health(address, service) == SERVING, service
    time.sleep(8)  # attempts at 0, 0.5, 1.5, 3.5 and 7.5 s: all refused
    for service in ("", HEALTH_SERVICE):
        assert _health(address, service) == NOT_SERVING, service
        assert _health(gateway_health, service) == NOT_SERVING, service
    log = log_path.read_text()
    unreachable = [line for line in log.splitlines() if "not reachable" in line]
    assert len(unreachable) == 1, unreachable
    assert f"upstream Kafka cluster 127.0.0.1:{port} not reachable" in unreachable[0]
    assert "retrying" in unreachable[0] and "WARNING" in unreachable[0]
    assert "Traceback" not in log

    # Kafka comes up on that port: ready within the backoff (at most 30 s) after it answers.
    kafka = KafkaBroker(tmp_path / "kafka")
    processes.append(kafka)
    try:
        kafka.start(port=port)
    except KafkaUnavailable as ex:
        pytest.fail(f"Apache Kafka could not be started: {ex}", pytrace=False)
    up = time.monotonic()
    _wait(lambda: _health(address, "") == SERVING, 45, "health SERVING", interval=0.5)
    became_ready_s = time.monotonic() - up
    assert _health(address, HEALTH_SERVICE) == SERVING
    _wait(
        lambda: all(_health(gateway_health, n) == SERVING for n in ("", HEALTH_SERVICE)),
        45,
        "the stand-alone gateway's health SERVING",
        interval=0.5,
    )
    gateway_log = (tmp_path / "gw" / "gateway.log").read_text()
    assert len([line for line in gateway_log.splitlines() if "not reachable" in line]) == 1
    log = log_path.read_text()
    assert "reachable after" in log and "Traceback" not in log
    assert len([line for line in log.splitlines() if "not reachable" in line]) == 1

    # and Kafka clients work through the gateway: the one started before too
    bootstrap = f"127.0.0.1:{proc.ports['kafka']}"
    topic = unique("late")
    early.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, **QUIET})
    for i in range(20):
        producer.produce(topic, value=f"v{i}")
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("late-group"),
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            **QUIET,
        }
    )
    seen: set[bytes] = set()
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(seen) < 20 and time.monotonic() < deadline:
            for m in consumer.consume(100, 0.2):
                if not m.error():
                    seen.add(m.value())
    finally:
        consumer.close()
    assert len(seen) == 20
    print(f"ready {became_ready_s:.1f}s after Kafka answered")


def test_upstream_broker_killed_and_restarted(tmp_path: Path, processes: list[Any]) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = KafkaCluster(tmp_path / "cluster", brokers=2, heap="384m")
    try:
        cluster.start_all()
    except KafkaUnavailable as ex:
        pytest.fail(f"the Kafka cluster could not be started: {ex}", pytrace=False)
    processes.append(cluster)
    proc = _dev(tmp_path, cluster.bootstrap)
    processes.append(proc)
    bootstrap = f"127.0.0.1:{proc.ports['kafka']}"
    topic = unique("failover")
    partitions = 4
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, partitions, 2)])[topic].result(30)

    def leaders() -> dict[int, int]:
        md = admin.list_topics(topic, timeout=10).topics[topic]
        return {p: md.partitions[p].leader for p in md.partitions}

    _wait(
        lambda: len(found := leaders()) == partitions and all(x >= 0 for x in found.values()),
        30,
        "leaders of every partition",
    )
    victim = 2  # a broker only (node 1 also holds the controller quorum)
    before = leaders()
    led = {p for p, leader in before.items() if leader == victim}
    assert led, f"broker {victim} leads nothing: {before}"
    listeners_before = {b.id: b.port for b in admin.list_topics(timeout=10).brokers.values()}

    delivered: set[str] = set()
    #: partition -> records produced after the kill and acknowledged (by a live leader)
    after_kill: dict[int, int] = {}
    failed: list[str] = []
    kill_index = 1 << 62  # records are numbered; those from here on were sent after the kill

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))
            return
        delivered.add(msg.value().decode())
        if int(msg.value()) >= kill_index:
            after_kill[msg.partition()] = after_kill.get(msg.partition(), 0) + 1

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "on_delivery": on_delivery,
            **QUIET,
        }
    )
    group = unique("failover-group")
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **QUIET,
        }
    )
    consumed: set[str] = set()
    ends: dict[int, int] = {}
    consumed_after_kill: set[int] = set()
    sent = 0

    def step(produce: bool = True) -> None:
        nonlocal sent
        if produce:
            for _ in range(10):
                producer.produce(topic, key=f"k{sent % 31}", value=str(sent))
                sent += 1
        producer.poll(0)
        batch = consumer.consume(500, 0.05)
        for m in batch:
            if m.error():
                continue
            consumed.add(m.value().decode())
            ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)
            if int(m.value()) >= kill_index:
                consumed_after_kill.add(m.partition())
        if batch:
            # One commit per batch: a commit per record queues hundreds of OffsetCommits
            # ahead of the heartbeats on the coordinator connection (answered in order).
            consumer.commit(asynchronous=True)

    restart_error: list[BaseException] = []

    def restart() -> None:
        try:
            cluster.start(victim)
        except BaseException as ex:  # noqa: BLE001 - reported by the test
            restart_error.append(ex)

    try:
        consumer.subscribe([topic])
        t0 = time.monotonic()
        while time.monotonic() - t0 < 4 or not consumed:
            step()
            assert time.monotonic() - t0 < 60, "nothing consumed before the kill"
        epoch_before = _group_epoch(proc.grpc_address, group)
        cluster.kill(victim)
        kill_index = sent
        t_kill = time.monotonic()
        # Keep going until the partitions the victim led took acknowledged records again
        # (their new leader, through its gateway listener) and the consumer read from them.
        while not (led <= set(after_kill) and led <= consumed_after_kill):
            step()
            assert time.monotonic() - t_kill < 90, (
                f"after the kill: acknowledged {after_kill}, consumed from "
                f"{sorted(consumed_after_kill)}; led by {victim}: {sorted(led)}; "
                f"failed {failed[-3:]}"
            )
        failover_s = time.monotonic() - t_kill
        moved = leaders()
        assert all(moved[p] != victim for p in led), moved
        restarting = threading.Thread(target=restart)
        restarting.start()
        while restarting.is_alive():
            step()
        assert not restart_error, restart_error
        # The broker rejoined: listed again, on the same gateway listener as before.
        _wait(
            lambda: (
                {b.id: b.port for b in admin.list_topics(timeout=10).brokers.values()}
                == listeners_before
            ),
            30,
            f"broker {victim} back in the metadata",
        )
        t_back = time.monotonic()
        while time.monotonic() - t_back < 3:
            step()
        assert producer.flush(60) == 0
        deadline = time.monotonic() + 60
        committed: dict[tuple[str, int], int] = {}
        while time.monotonic() < deadline:
            step(produce=False)
            if delivered <= consumed:
                committed = committed_offsets(admin, group)
                if committed == {(topic, p): o for p, o in ends.items()}:
                    break
        assert not failed, failed[:5]
        # The group lives in groupcoord: the broker's death and return did not touch it.
        assert _group_epoch(proc.grpc_address, group) == epoch_before
        assert len(delivered) == sent, (len(delivered), sent)
        missing = delivered - consumed
        assert not missing, f"{len(missing)} acknowledged records never consumed"
        assert committed == {(topic, p): o for p, o in ends.items()}, (committed, ends)
        assert sum(ends.values()) == sent  # idempotent producer: no duplicates either
        print(
            f"{sent} records; leaders {before} -> {moved}; failover {failover_s:.1f}s; "
            f"restart {t_back - t_kill - failover_s:.1f}s"
        )
    finally:
        consumer.close()
