"""``groupcoord repair``: truncate an offsets partition's log from its first corrupt
record."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from typing import TYPE_CHECKING

import click

from services.cli.store import StoreUrl, lock_sqlite_store

if TYPE_CHECKING:
    from shards.storage.base import LogStore


#: The repair's lease: long enough to load, decode and truncate one partition. It is
#: released at the end; if the repair dies, shards take the partition back once it expires.
REPAIR_LEASE_MS = 60_000


@click.command()
@click.option(
    "--store",
    type=StoreUrl(),
    required=True,
    help="The store holding the corrupt partition: sqlite:///path.db or "
    "redis://host:port/db[?key_prefix=gc].",
)
@click.option("--partition", "partition", type=click.IntRange(min=0), required=True)
@click.option("--yes", is_flag=True, help="Apply the truncation (default: dry run).")
def repair(store: str, partition: int, yes: bool) -> None:
    """Truncate an offsets partition's log from its first corrupt record.

    Dry run by default: only reads, and prints which entries would be dropped. With --yes it
    first acquires the partition (a new epoch, which fences any shard still holding it: the
    store refuses that shard's appends), truncates under that epoch and releases the lease;
    shards then load the partition from the repaired log, without a restart. On SQLite it
    refuses while a dev holds the file. The commits in the dropped entries are lost."""
    import socket

    from shards.storage import open_store
    from shards.storage.base import REPAIR_OWNER_PREFIX, FencedError

    # SQLite: writing needs the file to itself (the dry run only reads).
    lock = lock_sqlite_store(store) if yes else None  # noqa: F841
    owner = f"{REPAIR_OWNER_PREFIX}{socket.gethostname()}:{os.getpid()}"

    async def run() -> None:
        async with open_store(store) as log_store:
            # Read only first: a partition that decodes is never fenced for nothing.
            found = await _first_corrupt(log_store, partition)
            if found is None:
                click.echo(f"partition {partition}: every record decodes, nothing to repair")
                return
            holder = await log_store.lease(partition)
            if not yes:
                click.echo(f"{found} would be dropped (dry run; --yes to apply)")
                if holder is not None:
                    click.echo(
                        f"partition {partition}: {holder.owner} holds its lease at epoch "
                        f"{holder.epoch}; --yes fences it"
                    )
                return
            # From here on no older owner can append: its appends are refused by the store.
            epoch = await log_store.acquire(partition, owner, REPAIR_LEASE_MS)
            try:
                # Read again under our epoch: the log may have changed since the first look.
                found = await _first_corrupt(log_store, partition)
                if found is None:
                    click.echo(f"partition {partition}: every record decodes, nothing to repair")
                    return
                try:
                    n = await log_store.truncate_log(partition, epoch, found.offset)
                except FencedError as e:
                    raise click.ClickException(
                        f"partition {partition}: another owner acquired the partition during "
                        f"the repair ({e}); run the repair again"
                    ) from e
            finally:
                with contextlib.suppress(Exception):  # else the lease simply expires
                    await log_store.release(partition, owner, epoch)
            fenced = f"; fenced {holder.owner} (epoch {holder.epoch})" if holder else ""
            click.echo(f"{found}: dropped {n}{fenced}")

    asyncio.run(run())


@dataclasses.dataclass(frozen=True)
class _Corruption:
    partition: int
    offset: int  # the first corrupt entry
    dropped: list[int]  # offsets of the entries a truncation at ``offset`` drops
    last_good: int

    def __str__(self) -> str:
        return (
            f"partition {self.partition}: first corrupt record at offset {self.offset}; "
            f"{len(self.dropped)} entries (offsets {self.dropped[0]}..{self.dropped[-1]}) "
            f"after the last good offset {self.last_good}"
        )


async def _first_corrupt(log_store: LogStore, partition: int) -> _Corruption | None:
    """Load and decode the partition's log: its first corrupt entry, or None if every record
    decodes. A corrupt snapshot is an error (truncating the log cannot repair it)."""
    from shards.adapters.record_codec import RecordCodec
    from shards.runtime.partition import decode_log
    from shards.storage.base import CorruptRecordError

    loaded = await log_store.load(partition)
    try:
        for _ in decode_log(RecordCodec(), partition, loaded):
            pass
    except CorruptRecordError as e:
        if loaded.snapshot is not None and e.offset == loaded.snapshot.offset:
            raise click.ClickException(
                f"partition {partition}: the snapshot at offset {e.offset} is corrupt "
                f"({e.cause}); truncating the log cannot repair it"
            ) from e
        return _Corruption(
            partition,
            e.offset,
            [x.offset for x in loaded.entries if x.offset >= e.offset],
            max(
                [x.offset for x in loaded.entries if x.offset < e.offset],
                default=loaded.snapshot.offset if loaded.snapshot is not None else 0,
            ),
        )
    return None
