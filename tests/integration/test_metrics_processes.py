"""Metrics of real processes, scraped over HTTP from ``/metrics`` and parsed with
prometheus_client's text parser, after scripted scenarios whose counts are exact.

* ``groupcoord dev`` on a private Redis, with a separate ``assignor`` worker and a separate
  ``gateway``: consumer groups joining and leaving (gRPC), a classic group through the gateway
  (Kafka wire), commits, an offset expired by the retention, an OffsetDelete, and a failed
  append (Redis stopped for a moment): every counter and gauge of the scenario is checked on
  the process that exposes it.
* two ``groupcoord shard`` processes on Redis: kill -9 of one, the other takes its partitions
  over: leases, partitions moved in, failovers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from groupcoord.v1 import (
    common_pb2,
    consumer_group_pb2,
    coordinator_pb2_grpc,
    offsets_pb2,
)

from shards.core.errors import Errors
from tests.integration.multishard.cluster import Cluster
from tests.interop.sequences import join_req
from tests.support.kafka_wire import KafkaWire, request
from tests.support.metrics import Scrape, scrape, undocumented
from tests.support.offsets import commit_request, ensure_topic
from tests.support.processes import ServerProcess
from tests.support.redis_server import RedisServer, redis_server

pytestmark = pytest.mark.slow

NUM_PARTITIONS = 10


def until(url: str, check: Callable[[Scrape], bool], timeout: float = 30.0) -> Scrape:
    deadline = time.monotonic() + timeout
    while True:
        s = scrape(url)
        if check(s):
            return s
        if time.monotonic() > deadline:
            raise AssertionError(f"metrics at {url} never satisfied the check:\n{s.text[-4000:]}")
        time.sleep(0.1)


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path / "redis") as server:
        yield server


@pytest.fixture
def processes(tmp_path: Path, redis: RedisServer) -> Iterator[dict[str, ServerProcess]]:
    started: dict[str, ServerProcess] = {}
    try:
        started["assignor"] = ServerProcess(
            ["assignor", "--grpc-port", "0", "--metrics-port", "0"], tmp_path / "assignor.log"
        )
        config = ",".join(
            [
                "offsets_retention_ms=1500",
                "offsets_retention_check_interval_ms=200",
                "classic_group_initial_rebalance_delay_ms=0",
                # every target assignment goes to the assignor service
                "consumer_group_inline_assignment_max_size=0",
            ]
        )
        started["dev"] = ServerProcess(
            [
                "dev",
                "--grpc-port",
                "0",
                "--kafka-port",
                "0",
                "--metrics-port",
                "0",
                "--store",
                redis.url,
                "--num-partitions",
                str(NUM_PARTITIONS),
                "--set",
                config,
                "--assignor-addresses",
                started["assignor"].grpc_address,
                "--assignor-timeout-ms",
                "2000",
            ],
            tmp_path / "dev.log",
        )
        started["gateway"] = ServerProcess(
            [
                "gateway",
                "--shard-address",
                started["dev"].grpc_address,
                "--kafka-port",
                "0",
                "--metrics-port",
                "0",
                "--num-partitions",
                str(NUM_PARTITIONS),
            ],
            tmp_path / "gateway.log",
        )
        yield started
    finally:
        for p in started.values():
            p.kill()


def heartbeat(
    stub: coordinator_pb2_grpc.GroupCoordinatorStub, member: str, epoch: int, join: bool = False
) -> consumer_group_pb2.ConsumerGroupHeartbeatResponse:
    req = consumer_group_pb2.ConsumerGroupHeartbeatRequest(
        group_id="cg", member_id=member, member_epoch=epoch
    )
    if join:
        req.rebalance_timeout_ms = 30_000
        req.subscribed_topic_names.CopyFrom(common_pb2.StringList(values=["orders"]))
        req.topic_partitions.CopyFrom(common_pb2.TopicPartitionsList(topic_partitions=[]))
    response = stub.ConsumerGroupHeartbeat(req, timeout=10)
    assert response.error_code == 0, response
    return response


async def classic_group(port: int) -> int:
    """One classic member through the gateway: JoinGroup (twice: KIP-394), SyncGroup; how
    many times the member had to start over.

    Between the two JoinGroups the new group is Empty with one pending member, and the
    cleanup this dev process runs every 200 ms deletes an Empty group without offsets,
    pending member or not (a member 300 ms late finds its group gone every time, before the
    group timer buckets as after). The second JoinGroup is then
    UNKNOWN_MEMBER_ID, and the member starts over, as a Kafka client does; under CI's load
    that happened about once in 40 runs. The caller counts the requests accordingly."""
    wire = await KafkaWire.connect("127.0.0.1", port)
    try:
        restarts = 0
        while True:
            r = await wire.send(join_req(5, "cl", ""))
            assert r.error_code.value == Errors.MEMBER_ID_REQUIRED
            member = r.member_id
            r = await wire.send(join_req(5, "cl", member))
            if r.error_code.value != Errors.UNKNOWN_MEMBER_ID or restarts == 3:
                break
            restarts += 1
        assert r.error_code.value == 0, r
        r = await wire.send(
            request(
                "sync_group",
                5,
                group_id="cl",
                generation_id=r.generation_id,
                member_id=member,
                protocol_type="consumer",
                protocol_name="range",
                assignments=[{"member_id": member, "assignment": b"a1"}],
            )
        )
        assert r.error_code.value == 0, r
        return restarts
    finally:
        await wire.close()


def test_dev_gateway_and_assignor_metrics_after_a_scripted_scenario(
    processes: dict[str, ServerProcess], redis: RedisServer
) -> None:
    dev, gateway, assignor = processes["dev"], processes["gateway"], processes["assignor"]
    assert dev.metrics_url and gateway.metrics_url and assignor.metrics_url
    ensure_topic(dev.grpc_address, "orders", 4)
    ensure_topic(dev.grpc_address, "t", 8)
    with grpc.insecure_channel(dev.grpc_address) as channel:
        stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)

        # consumer group: a joins, b joins, b leaves -- three writes that bump the epoch
        a = heartbeat(stub, "a", 0, join=True)
        heartbeat(stub, "b", 0, join=True)
        heartbeat(stub, "b", -1)
        epoch = (
            stub.ConsumerGroupDescribe(
                consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=["cg"])
            )
            .groups[0]
            .group_epoch
        )
        assert epoch >= 3

        # classic group through the separate gateway
        restarts = asyncio.run(classic_group(gateway.ports["kafka"]))
        joins = 2 * (1 + restarts)  # (KIP-394: two JoinGroups a try)

        # commits: 2 by member a (its group keeps them), 1 that expires, 1 deleted
        a_epoch = heartbeat(stub, "a", a.member_epoch).member_epoch
        member_commit = offsets_pb2.OffsetCommitRequest(
            group_id="cg",
            member_id="a",
            generation_id_or_member_epoch=a_epoch,
            topics=[
                offsets_pb2.OffsetCommitRequestTopic(
                    name="orders",
                    partitions=[
                        offsets_pb2.OffsetCommitRequestPartition(
                            partition_index=i, committed_offset=7
                        )
                        for i in (0, 1)
                    ],
                )
            ],
        )
        r = stub.OffsetCommit(member_commit, timeout=10)
        assert [p.error_code for p in r.topics[0].partitions] == [0, 0]
        r = stub.OffsetCommit(commit_request("old", 1, "t", 0), timeout=10)
        assert r.topics[0].partitions[0].error_code == 0
        until(dev.metrics_url, lambda s: s.value("groupcoord_offset_expirations_total") >= 1)
        r = stub.OffsetCommit(commit_request("del", 1, "t", 0), timeout=10)
        assert r.topics[0].partitions[0].error_code == 0
        deleted = stub.OffsetDelete(
            offsets_pb2.OffsetDeleteRequest(
                group_id="del",
                topics=[
                    offsets_pb2.OffsetDeleteRequestTopic(
                        name="t",
                        partitions=[offsets_pb2.OffsetDeleteRequestPartition(partition_index=0)],
                    )
                ],
            ),
            timeout=10,
        )
        assert deleted.error_code == 0

        # the periodic cleanup removes the empty simple groups "old" and "del" (a write):
        # from then on nothing but the next commit appends
        until(dev.metrics_url, lambda s: s.value("groupcoord_groups", protocol="classic") == 1)

        # a failed append: Redis is stopped under a commit, then started again
        redis.stop()
        try:
            failed = stub.OffsetCommit(commit_request("doomed", 1, "t", 0), timeout=30)
            assert failed.topics[0].partitions[0].error_code != 0
        except grpc.RpcError as ex:
            assert ex.code() is grpc.StatusCode.UNAVAILABLE
        finally:
            redis.start()
        # the partition of the failed append reloads once Redis is back
        s = until(
            dev.metrics_url,
            lambda s: (
                s.value("groupcoord_partitions", state="active") == NUM_PARTITIONS
                and s.value("groupcoord_partition_load_duration_seconds_count") > NUM_PARTITIONS
            ),
        )

    # ---- dev: group coordinator, offsets, storage, RPCs ---------------------------------
    assert s.value("groupcoord_offset_commits_total") == 4  # the failed one is not counted
    assert s.value("groupcoord_offset_expirations_total") == 1
    assert s.value("groupcoord_offset_deletions_total") == 1
    assert s.value("groupcoord_group_rebalances_total", protocol="consumer") == 3
    assert s.value("groupcoord_group_rebalances_total", protocol="classic") == 1
    assert s.value("groupcoord_groups", protocol="consumer") == 1
    assert s.value("groupcoord_groups", protocol="classic") == 1  # "cl"
    assert s.value("groupcoord_classic_groups", state="stable") == 1
    assert s.value("groupcoord_consumer_groups") == 1
    assert s.value("groupcoord_storage_append_failures_total") == 1
    assert s.value("groupcoord_partitions", state="failed") == 0
    assert s.value("groupcoord_leases_held") == NUM_PARTITIONS
    # 10 loads at start, one reload after the failed append
    assert s.value("groupcoord_partition_load_duration_seconds_count") == NUM_PARTITIONS + 1
    assert s.value("groupcoord_partition_load_time_max_seconds") > 0
    assert s.value("groupcoord_storage_append_duration_seconds_count") >= 6
    assert len(s.find("groupcoord_event_queue_size")) == NUM_PARTITIONS
    idle = s.find("groupcoord_event_loop_idle_ratio", stat="last")
    assert len(idle) == 1 and 0 <= idle[0].value <= 1
    # the collector ran (young collections at least) and its pauses were timed
    assert s.value("groupcoord_gc_pause_duration_seconds_count", generation="0") >= 1
    commit_ok = {"method": "GroupCoordinator/OffsetCommit", "grpc_status": "OK"}
    assert s.value("groupcoord_rpc_server_duration_seconds_count", **commit_ok) >= 4
    # the gateway's JoinGroup calls reached the shard
    join = {"method": "GroupCoordinator/JoinGroup", "grpc_status": "OK"}
    assert s.value("groupcoord_rpc_server_duration_seconds_count", **join) == joins
    assert (
        s.value(
            "groupcoord_rpc_server_kafka_errors_total",
            method="GroupCoordinator/JoinGroup",
            error="MEMBER_ID_REQUIRED",
        )
        == joins // 2
    )
    # every target assignment went to the assignor service (at most one computation per
    # group at a time: the three rebalances ask for one or more, each answered or found
    # stale; none computed in-process)
    calls = s.value("groupcoord_assignor_client_calls_total")
    remote_ok = s.value("groupcoord_assignor_client_remote_ok_total")
    assert 1 <= remote_ok <= calls
    assert s.value("groupcoord_assignor_client_fallbacks_total") == 0
    assert s.value("groupcoord_assignor_client_failures_total") == 0
    assign_client = {"method": "Assignor/Assign", "grpc_status": "OK"}
    assert s.value("groupcoord_rpc_client_duration_seconds_count", **assign_client) == remote_ok
    # (a call cancelled while its request is still being encoded, off the loop, never
    # reaches the wire: counted in calls, with no RPC to time)
    rpcs = s.value("groupcoord_rpc_client_duration_seconds_count", method="Assignor/Assign")
    assert remote_ok <= rpcs <= calls
    assert s.has("process_cpu_seconds_total")

    # ---- assignor: served what the shard asked -----------------------------------------
    a_scrape = scrape(assignor.metrics_url)
    served_ok = a_scrape.value("groupcoord_assignor_server_requests_total", outcome="ok")
    assert remote_ok <= served_ok <= calls
    served = {"method": "Assignor/Assign", "grpc_status": "OK"}
    assert a_scrape.value("groupcoord_rpc_server_duration_seconds_count", **served) == served_ok

    # ---- gateway: Kafka requests by API and version, bytes, its calls to the shard -----
    g = scrape(gateway.metrics_url)
    assert g.value("groupcoord_gateway_requests_total", api="join_group", version="5") == joins
    assert g.value("groupcoord_gateway_requests_total", api="sync_group", version="5") == 1
    assert g.value("groupcoord_gateway_request_duration_seconds_count", api="join_group") == joins
    assert g.value("groupcoord_gateway_connections_total", outcome="accepted") == 1
    assert g.value("groupcoord_gateway_open_connections") == 0
    assert g.value("groupcoord_gateway_bytes_total", direction="in") > 0
    assert g.value("groupcoord_gateway_bytes_total", direction="out") > 0
    assert g.value("groupcoord_gateway_forwarded_bytes_total") == 0  # not in proxy mode
    shard_join = {"method": "GroupCoordinator/JoinGroup", "grpc_status": "OK"}
    assert g.value("groupcoord_rpc_client_duration_seconds_count", **shard_join) == joins

    # docs/observability.md lists every metric each process exposes
    assert undocumented(s) | undocumented(a_scrape) | undocumented(g) == set()


def test_assignor_counts_a_rejected_spec(tmp_path: Path) -> None:
    from groupcoord.v1 import assignor_pb2, assignor_pb2_grpc

    with ServerProcess(
        ["assignor", "--grpc-port", "0", "--metrics-port", "0"], tmp_path / "assignor.log"
    ) as proc:
        assert proc.metrics_url
        with grpc.insecure_channel(proc.grpc_address) as channel:
            stub = assignor_pb2_grpc.AssignorStub(channel)
            with pytest.raises(grpc.RpcError) as err:
                stub.Assign(assignor_pb2.AssignRequest(assignor="no-such-assignor"), timeout=10)
            assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        # the server records a call's latency once its handler has unwound, which may be
        # just after the caller has its status: wait for that one measurement
        rejected = {"method": "Assignor/Assign", "grpc_status": "INVALID_ARGUMENT"}
        s = until(
            proc.metrics_url,
            lambda s: s.value("groupcoord_rpc_server_duration_seconds_count", **rejected) > 0,
        )
        assert s.value("groupcoord_rpc_server_duration_seconds_count", **rejected) == 1
        assert s.value("groupcoord_assignor_server_requests_total", outcome="invalid") == 1
        assert s.value("groupcoord_assignor_server_requests_total", outcome="ok") == 0


async def test_failover_between_two_shards_on_redis(tmp_path: Path, redis: RedisServer) -> None:
    cluster = Cluster(tmp_path, redis, num_partitions=12, extra_args=["--metrics-port", "0"])
    try:
        for node in (0, 1):
            cluster.start(node)
        target = await cluster.wait_settled()
        held = {n: sum(1 for m in target.values() if m == str(n)) for n in (0, 1)}
        assert held[0] > 0 and held[1] > 0 and sum(held.values()) == 12
        urls = {n: cluster.shards[n].metrics_url for n in (0, 1)}
        for n in (0, 1):
            s = await asyncio.to_thread(
                until, urls[n], lambda s, n=n: s.value("groupcoord_leases_held") == held[n]
            )
            assert s.value("groupcoord_partitions", state="active") == held[n]
            moved_in = s.value("groupcoord_partitions_moved_total", direction="in")
            moved_out = s.value("groupcoord_partitions_moved_total", direction="out")
            assert moved_in - moved_out == held[n]
            # shard 0 started alone and took everything, then handed shard 1 its share:
            # a graceful handoff, not a failover
            assert (moved_in, moved_out) == ((12, held[1]) if n == 0 else (held[1], 0))
            assert s.value("groupcoord_failovers_total") == 0

        await asyncio.to_thread(cluster.kill, 1)  # a crash: its leases are not released
        s = await asyncio.to_thread(
            until,
            urls[0],
            lambda s: s.value("groupcoord_partitions", state="active") == 12,
            60.0,
        )
        assert s.value("groupcoord_leases_held") == 12
        assert s.value("groupcoord_partitions_moved_total", direction="in") == 12 + held[1]
        assert s.value("groupcoord_partitions_moved_total", direction="out") == held[1]
        assert s.value("groupcoord_failovers_total") == held[1]
        assert undocumented(s) == set()
    finally:
        cluster.close()


def test_a_metrics_port_in_use_is_a_clear_start_up_error(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    from tests.support.processes import ROOT

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "services.cli", "assignor", "--grpc-port", "0"]
            + ["--metrics-port", str(port)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    # checked before anything starts: one line naming the option (services/cli/preflight.py)
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1, out.stderr
    assert f"--metrics-port {port}: 127.0.0.1:{port} is already in use" in out.stderr
    assert "groupcoord: metrics on" not in out.stdout
