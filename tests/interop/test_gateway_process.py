"""``groupcoord gateway`` as its own process in front of a shard process: what a deployment
runs. A real client sees the gateway (not the shard) as broker and coordinator."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.interop.clients import QUIET, create_topic
from tests.interop.support import Target, unique
from tests.support.processes import ServerProcess, gateway_process

pytestmark = pytest.mark.interop


def test_standalone_gateway_serves_a_real_client(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    shard = ServerProcess(
        [
            "dev",
            "--grpc-port",
            "0",
            "--kafka-port",
            "0",
            "--num-partitions",
            "10",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        tmp_path / "shard.log",
    )
    try:
        gw = gateway_process(
            shard.grpc_address,
            10,
            tmp_path / "gateway.log",
            "--node-id",
            "7",
            "--cluster-id",
            "standalone",
        )
        try:
            target = Target("gateway", "127.0.0.1", gw.ports["kafka"])
            topic, group = unique("t"), unique("g")
            create_topic(target, topic, 3)
            admin = AdminClient({"bootstrap.servers": target.bootstrap, **QUIET})
            md = admin.list_topics(timeout=10)
            assert md.cluster_id == "standalone"
            assert [(b.id, b.port) for b in md.brokers.values()] == [(7, target.port)]
            c = Consumer(
                {
                    "bootstrap.servers": target.bootstrap,
                    "group.id": group,
                    "enable.auto.commit": False,
                    **QUIET,
                }
            )
            try:
                c.commit(offsets=[TopicPartition(topic, 1, 42)], asynchronous=False)
                (got,) = c.committed([TopicPartition(topic, 1)], timeout=10)
                assert got.offset == 42
            finally:
                c.close()
            listed = admin.list_consumer_groups(request_timeout=10).result(20)
            assert group in {g.group_id for g in listed.valid}
        finally:
            gw.kill()
    finally:
        shard.kill()
