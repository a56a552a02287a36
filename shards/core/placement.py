"""Which offsets partition a group lives on: exactly Kafka's placement.

Kafka computes ``Utils.abs(groupId.hashCode()) % numPartitions`` where ``hashCode`` is
Java's ``String.hashCode`` (31-polynomial over UTF-16 code units with 32-bit overflow) and
``Utils.abs(Integer.MIN_VALUE)`` is 0 (Java's own ``Math.abs`` would return MIN_VALUE).
"""

from __future__ import annotations

import functools


def java_string_hashcode(s: str) -> int:
    """Java's String.hashCode as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


INT_MIN = -(2**31)


def kafka_abs(n: int) -> int:
    """org.apache.kafka.common.utils.Utils.abs: the absolute value, except abs(MIN_INT) == 0."""
    return 0 if n == INT_MIN else abs(n)


#: a gateway and a shard place every request's group: the partition of a group id seen recently
#: is remembered (a bounded table; the hash costs about a microsecond per character)
@functools.lru_cache(maxsize=1 << 16)
def partition_for(group_id: str, num_partitions: int) -> int:
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    return kafka_abs(java_string_hashcode(group_id)) % num_partitions


def probe_keys(num_partitions: int) -> list[str]:
    """One group id per offsets partition (index = partition; deterministic): asking
    FindCoordinator about them tells who owns every partition (ListGroups fans out so)."""
    keys: list[str | None] = [None] * num_partitions
    missing, i = num_partitions, 0
    while missing:
        key = f"groupcoord-probe-{i}"
        p = partition_for(key, num_partitions)
        if keys[p] is None:
            keys[p] = key
            missing -= 1
        i += 1
    return [k for k in keys if k is not None]
