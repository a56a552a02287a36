"""The checks a committed offset's partition gets before its group is asked, shared by
OffsetCommit (offsets.py) and TxnOffsetCommit (txn_offsets.py)."""

from __future__ import annotations

from shards.core.errors import Errors


def java_string_length(s: str) -> int:
    """Java's String.length(): UTF-16 code units (a character beyond the BMP counts 2)."""
    if s.isascii():
        return len(s)
    return len(s.encode("utf-16-le")) // 2


def partition_refusal(
    partition_index: int, metadata: str | None, max_metadata_bytes: int
) -> tuple[Errors, str] | None:
    """Why a partition of an OffsetCommit or TxnOffsetCommit is refused before its group is
    asked: a negative index (no topic has such a partition), metadata longer than
    ``offset.metadata.max.bytes``; None when neither."""
    if partition_index < 0:
        return Errors.UNKNOWN_TOPIC_OR_PARTITION, "the partition index must not be negative"
    if metadata is not None and java_string_length(metadata) > max_metadata_bytes:
        return (
            Errors.OFFSET_METADATA_TOO_LARGE,
            f"metadata is longer than offset.metadata.max.bytes ({max_metadata_bytes})",
        )
    return None
