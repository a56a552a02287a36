"""The topic catalog's stored form: a ``CatalogDocument`` protobuf (records.proto) <-> the
core's :class:`TopicsImage`. Topics are written sorted by name, so that the same catalog
always gives the same bytes."""

from __future__ import annotations

from groupcoord.v1 import records_pb2

from shards.core.topics import TopicImage, TopicsImage


def decode_catalog(version: int, data: bytes) -> TopicsImage:
    if not data:
        return TopicsImage.of(version, [])
    parsed = records_pb2.CatalogDocument.FromString(data)
    return TopicsImage.of(
        version,
        [
            TopicImage(
                t.topic_id,
                t.name,
                t.num_partitions,
                tuple(tuple(p.racks) for p in t.partition_racks),
            )
            for t in parsed.topics
        ],
    )


def encode_catalog(topics: list[TopicImage]) -> bytes:
    return records_pb2.CatalogDocument(
        topics=[
            records_pb2.CatalogTopic(
                topic_id=t.topic_id,
                name=t.name,
                num_partitions=t.num_partitions,
                partition_racks=[
                    records_pb2.CatalogPartitionRacks(racks=list(r)) for r in t.partition_racks
                ],
            )
            for t in sorted(topics, key=lambda t: t.name)
        ]
    ).SerializeToString()
