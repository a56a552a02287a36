"""Argument checks shared by the backends, so that both reject the same inputs the same way."""

from __future__ import annotations


def check_partition(partition: int) -> None:
    if partition < 0:
        raise ValueError(f"partition must be >= 0, got {partition}")


def check_lease_ms(lease_ms: int) -> None:
    if lease_ms <= 0:
        raise ValueError(f"lease_ms must be > 0, got {lease_ms}")


def check_snapshot_offset(
    partition: int, offset: int, last_offset: int, current_snapshot_offset: int | None = None
) -> None:
    """A snapshot must lie inside the log and may not go back behind the current snapshot
    (the entries in between were trimmed when that snapshot was written)."""
    if offset < 0:
        raise ValueError(f"partition {partition}: snapshot offset must be >= 0, got {offset}")
    if offset > last_offset:
        raise ValueError(
            f"partition {partition}: snapshot offset {offset} is beyond the log end ({last_offset})"
        )
    if current_snapshot_offset is not None and offset < current_snapshot_offset:
        raise ValueError(
            f"partition {partition}: snapshot offset {offset} is older than the current "
            f"snapshot ({current_snapshot_offset})"
        )


def check_truncate_offset(partition: int, from_offset: int) -> None:
    if from_offset < 1:
        raise ValueError(
            f"partition {partition}: truncation offset must be >= 1 (offsets start at 1), "
            f"got {from_offset}"
        )
