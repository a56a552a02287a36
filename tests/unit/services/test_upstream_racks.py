"""UpstreamCluster.fetch_topics: the racks of a broker that is down (missing from Metadata's
brokers, still named as a replica) are its last known ones, so that a broker restart changes
no topic in the catalog and bumps no group epoch (found by tests/interop/test_proxy_faults.py:
the group epoch went up by 2 across a broker kill and restart)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

from services.upstream.cluster import UpstreamCluster


def _metadata(live: dict[int, str]) -> Any:
    topic_id = uuid.UUID(int=7)
    return SimpleNamespace(
        brokers=[
            SimpleNamespace(node_id=n, host="h", port=9092 + n, rack=r) for n, r in live.items()
        ],
        cluster_id="c",
        controller_id=1,
        topics=[
            SimpleNamespace(
                error_code=0,
                is_internal=False,
                name="t",
                topic_id=topic_id,
                partitions=[
                    SimpleNamespace(partition_index=0, replica_nodes=[1, 2]),
                    SimpleNamespace(partition_index=1, replica_nodes=[2, 1]),
                ],
            )
        ],
    )


class Scripted(UpstreamCluster):
    def __init__(self, answers: list[Any]) -> None:
        super().__init__("127.0.0.1:1")
        self.answers = answers

    async def metadata(self, topics: Any = None) -> Any:
        return self.answers.pop(0)


async def test_a_broker_that_is_down_keeps_its_replicas_racks() -> None:
    cluster = Scripted(
        [
            _metadata({1: "rack-a", 2: "rack-b"}),
            _metadata({1: "rack-a"}),  # broker 2 killed
            _metadata({1: "rack-a", 2: "rack-b"}),  # and back
        ]
    )
    images = [(await cluster.fetch_topics())[0] for _ in range(3)]
    assert images[0].partition_racks == (("rack-a", "rack-b"), ("rack-b", "rack-a"))
    assert images[0] == images[1] == images[2]


async def test_a_broker_never_seen_has_no_rack() -> None:
    cluster = Scripted([_metadata({1: "rack-a"})])
    [image] = await cluster.fetch_topics()
    assert image.partition_racks == (("rack-a",), ("rack-a",))
