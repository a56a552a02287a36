"""The polyglot check: the Go and Java clients generated from ``proto/`` (``clients/go``,
``clients/java``; built at test time, cached) run the smoke scenario against a real
``groupcoord dev`` -- health, CreateTopics, FindCoordinator, two KIP-848 members joining until
Stable, OffsetCommit/OffsetFetch, both leaving, the group described Empty -- and the offsets
they committed are then read back from Python over the project's own client.

No skip: CI has Go, Maven and a JDK, so a missing toolchain is a failure here."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from groupcoord.v1 import catalog_pb2, catalog_pb2_grpc, consumer_group_pb2, offsets_pb2

from services.client.coordinator_client import CoordinatorClient
from tests.interop import generated_clients
from tests.interop.generated_clients import NUM_PARTITIONS, ToolMissing
from tests.interop.kafka_broker import groupcoord_args
from tests.support.processes import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess.dev(tmp_path_factory.mktemp("generated-clients"), *groupcoord_args())
    try:
        yield proc
    finally:
        proc.kill()


def built(build: Callable[[], list[str]]) -> list[str]:
    """The client's command line, building it if needed; a missing toolchain fails the test."""
    started = time.monotonic()
    try:
        cmd = build()
    except ToolMissing as ex:
        pytest.fail(str(ex))
    print(f"{build.__name__}: ready in {time.monotonic() - started:.1f} s")
    return cmd


def run_smoke(cmd: list[str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cmd, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


async def committed(server: ServerProcess, group: str) -> dict[tuple[str, int], int]:
    async with CoordinatorClient(server.grpc_address) as client:
        fetched = await client.offset_fetch(offsets_pb2.OffsetFetchRequestGroup(group_id=group))
    assert fetched.error_code == 0, fetched
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in fetched.topics
        for p in t.partitions
    }


async def described(
    server: ServerProcess, group: str
) -> consumer_group_pb2.ConsumerGroupDescribedGroup:
    async with CoordinatorClient(server.grpc_address) as client:
        response = await client.stub(server.grpc_address).ConsumerGroupDescribe(
            consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=[group]), timeout=10
        )
    (group_described,) = response.groups
    return group_described


async def topic_partitions(server: ServerProcess, topic: str) -> int:
    async with CoordinatorClient(server.grpc_address) as client:
        stub = catalog_pb2_grpc.TopicCatalogStub(client.channel(server.grpc_address))
        response = await stub.DescribeTopics(catalog_pb2.DescribeTopicsRequest(), timeout=10)
    counts = {t.name: t.num_partitions for t in response.topics}
    return counts.get(topic, 0)


@pytest.mark.parametrize(
    ("build", "flag", "offset"),
    [
        (generated_clients.go_smoke, "-", generated_clients.go_offset),
        (generated_clients.java_smoke, "--", generated_clients.java_offset),
    ],
    ids=["go", "java"],
)
async def test_generated_client_runs_smoke_scenario_and_its_offsets_are_committed(
    server: ServerProcess,
    build: Callable[[], list[str]],
    flag: str,
    offset: Callable[[int], int],
) -> None:
    cmd = built(build)
    group, topic = f"smoke-{uuid.uuid4().hex[:8]}", f"smoke-{uuid.uuid4().hex[:8]}"

    done = run_smoke(cmd, f"{flag}group", group, f"{flag}topic", topic, server.grpc_address)

    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert done.stdout.strip() == f"smoke: ok group={group} topic={topic}"
    assert await committed(server, group) == {(topic, p): offset(p) for p in range(NUM_PARTITIONS)}
    assert await topic_partitions(server, topic) == NUM_PARTITIONS
    after = await described(server, group)
    assert (after.group_state, list(after.members)) == ("Empty", [])


@pytest.mark.parametrize(
    ("build", "flag"),
    [(generated_clients.go_smoke, "-"), (generated_clients.java_smoke, "--")],
    ids=["go", "java"],
)
def test_generated_client_fails_with_one_line_when_nothing_listens(
    build: Callable[[], list[str]], flag: str
) -> None:
    cmd = built(build)
    args = (
        [f"{flag}group", "g", "127.0.0.1:1"] if flag == "--" else ["-timeout", "5s", "127.0.0.1:1"]
    )

    done = run_smoke(cmd, *args, timeout=60)

    assert done.returncode == 1, f"{done.stdout}\n{done.stderr}"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("smoke: FAILED: "), done.stderr
