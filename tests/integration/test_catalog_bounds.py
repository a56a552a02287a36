"""A catalog poisoned by one CreateTopics (issue 36 item 4), against a real ``groupcoord dev``
process: a topic of 2,147,483,647 partitions already in the store (what one CreateTopics
left before the catalog had bounds; the catalog is durable) is kept out of what the process
serves -- Metadata of every topic is answered at once, without it, and its partitions are
unknown to commits -- an error in the log names the way out, and ``groupcoord topics delete``
removes it. New ones are refused as Kafka's controller refuses them (POLICY_VIOLATION,
"Excessively large number of partitions per request.")."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shards.adapters.catalog_codec import decode_catalog, encode_catalog
from shards.core.errors import Errors
from shards.core.topics import TOO_MANY_PARTITIONS_PER_REQUEST, TopicImage
from shards.storage import open_store
from shards.topic_catalog import random_topic_id
from tests.support.kafka_wire import KafkaWire, request
from tests.support.processes import ROOT, ServerProcess

pytestmark = pytest.mark.slow

HUGE = 2**31 - 1


async def poison(db: Path) -> None:
    """The catalog as an unbounded CreateTopics left it: ``poison`` and a sane topic."""
    async with open_store(f"sqlite:///{db}") as store:
        doc = await store.read_catalog()
        topics = [
            TopicImage(random_topic_id(), "poison", HUGE),
            TopicImage(random_topic_id(), "orders", 3),
        ]
        assert await store.write_catalog(doc.version, encode_catalog(topics)) is not None


def create(*topics: tuple[str, int]) -> object:
    return request(
        "create_topics",
        7,
        topics=[
            {
                "name": name,
                "num_partitions": n,
                "replication_factor": -1,
                "assignments": [],
                "configs": [],
            }
            for name, n in topics
        ],
        timeout=5000,
        validate_only=False,
    )


def commit(topic: str) -> object:
    return request(
        "offset_commit",
        9,
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=[
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 1,
                        "committed_leader_epoch": -1,
                        "committed_metadata": None,
                    }
                ],
            }
        ],
    )


async def metadata_names(w: KafkaWire) -> list[str]:
    r = await w.send(request("metadata", 12, topics=None), timeout=10)
    return sorted(t.name for t in r.topics)


def test_a_poisoned_catalog_is_served_without_its_oversized_topic(tmp_path: Path) -> None:
    data = tmp_path / "dev" / "data"
    data.mkdir(parents=True)
    asyncio.run(poison(data / "groupcoord.db"))
    with ServerProcess.dev(tmp_path / "dev", "--num-partitions", "4") as dev:

        async def scenario() -> None:
            w = await KafkaWire.connect("127.0.0.1", dev.ports["kafka"])
            try:
                # answered at once (before: 2**31 partitions built, 3 GB, no answer)
                assert await metadata_names(w) == ["orders"]
                r = await w.send(commit("poison"))
                assert r.topics[0].partitions[0].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
                assert (await w.send(commit("orders"))).topics[0].partitions[0].error_code == 0
                # new ones: refused whole, as Kafka's controller does
                r = await w.send(create(("again", HUGE), ("small", 1)))
                assert [(t.name, t.error_code, t.error_message) for t in r.topics] == [
                    ("again", Errors.POLICY_VIOLATION, TOO_MANY_PARTITIONS_PER_REQUEST),
                    ("small", Errors.POLICY_VIOLATION, TOO_MANY_PARTITIONS_PER_REQUEST),
                ]
                r = await w.send(create(("wide", 10_001)))
                assert r.topics[0].error_code == Errors.POLICY_VIOLATION
                assert await metadata_names(w) == ["orders"]
            finally:
                await w.close()

        asyncio.run(scenario())
        log = dev.log_path.read_text()
        assert "topic 'poison'" in log and "groupcoord topics delete poison" in log

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "services.cli", "topics", *args],
                cwd=ROOT,
                env={**os.environ, "GROUPCOORD_BOOTSTRAP": dev.grpc_address},
                capture_output=True,
                text=True,
                timeout=60,
            )

        described = cli("describe", "poison")
        assert described.returncode == 1
        assert "POLICY_VIOLATION" in described.stderr
        assert "--max-partitions-per-topic (10000)" in described.stderr
        # the way out: the CLI deletes it over gRPC (DeleteTopics works on the document)
        deleted = cli("delete", "poison")
        assert deleted.returncode == 0, deleted.stderr

        async def after() -> None:
            async with open_store(f"sqlite:///{data / 'groupcoord.db'}") as store:
                doc = await store.read_catalog()
            assert sorted(decode_catalog(doc.version, doc.data).by_name) == ["orders"]
            w = await KafkaWire.connect("127.0.0.1", dev.ports["kafka"])
            try:
                r = await w.send(create(("poison", 5)))  # the name is free again
                assert r.topics[0].error_code == 0
                assert await metadata_names(w) == ["orders", "poison"]
            finally:
                await w.close()

        asyncio.run(after())
