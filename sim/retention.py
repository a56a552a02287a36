"""Offsets retention in the simulator, and the shards' time taken from the store.

Every shard process's wall time is the store's (:class:`shards.clock.StoreTime` over the
process's own, skewable clock, synced with the simulated store's clock at start and every
10 s by the same functions ``services/shard/app.py`` uses): so a ``skew`` event moves the
host clock, which must move nothing a shard decides with.

In a share of the seeds (``Config.retention_share``, an RNG of their own) offsets expire
within the run: ``offsets.retention.ms`` is 3-10 s and the expiration runs every second (the
real ``cleanup_group_metadata`` timer of every partition). A standalone consumer (a simple
group, ``solo``: generation -1, no member) commits partitions of ``t0`` for a few seconds
and stops, so its offsets -- and then the empty group -- expire while the run goes on; the
members' offsets expire too where the rules say so (an empty group, a topic no longer
subscribed).

The invariant (``check``): **no offset expires before its retention has passed on the
store's clock** since the commit request carrying it was sent. Each expiration the core
decides is seen as it is made (the partition's ``cleanup_expired_offsets`` is watched): the
store's time then, less the store's time when the request was sent, must be at least the
retention, less the error a clock sync may have (half the longest round trip it accepts).
When the store's clock jumps ahead (``store_clock``), the shards follow at their next sync
(within 10 s): a commit stamped in between by a shard still on the old time is that much
older on the new one, and may expire that much early -- as any clock that steps does to
Kafka's brokers. Those jumps (of the sync interval before the commit was sent, or since)
are allowed for; a *shard's* own clock moving (``skew``) is not. Offsets committed with an
explicit retention time are not drawn (none are sent).
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any

from shards.clock import CLOCK_SYNC_INTERVAL_MS, StoreTime
from shards.core import api
from shards.core.errors import Errors
from shards.storage.base import StoreError

if TYPE_CHECKING:
    from shards.core.state_machine import CoordinatorStateMachine
    from sim.events import Config
    from sim.world import Sim

#: the simple group the standalone consumer commits for
SOLO = "solo"
#: the error a synced clock may have: half the longest round trip a sync accepts
SYNC_ERROR_MS = StoreTime.MAX_RTT_MS // 2


def retention_ms(seed: int, cfg: Config) -> int | None:
    """``offsets.retention.ms`` of ``seed`` if its offsets expire within the run (an RNG of
    its own), else None (the default, seven days: nothing expires)."""
    rng = random.Random(f"retention-{seed}")
    if rng.random() >= cfg.retention_share:
        return None
    return rng.randrange(3_000, 10_000)


class Retention:
    """The standalone consumer, the expirations as they are decided, and their check."""

    def __init__(self, sim: Sim, retention_ms: int | None) -> None:
        self.sim = sim
        self.retention_ms = retention_ms
        self.rng = random.Random(f"solo-{sim.seed}")
        #: commit offset (each commit of the run has its own) -> (the store's time, virtual
        #: s) it was sent at
        self.sent: dict[int, tuple[int, float]] = {}
        #: (virtual s, ms) of each jump of the store's clock
        self.store_jumps: list[tuple[float, int]] = []
        #: (group, topic, partition, offset, store time, the deciding clock's, process)
        self.expired: list[tuple[str, str, int, int, int, int, str]] = []
        self._checked = 0

    def next_offset(self) -> int:
        """The offset a commit about to be sent carries (unique in the run), noted with the
        store's time."""
        sim = self.sim
        sim.commit_seq += 1
        self.sent[sim.commit_seq] = (sim.store_world.clock.now_ms(), sim.loop.now)
        return sim.commit_seq

    def watch(self, sm: CoordinatorStateMachine, process: str) -> None:
        """See each expiration ``sm`` decides: its offsets manager's tombstones, the time it
        decided with, and the store's time then."""
        if self.retention_ms is None:
            return
        offsets = sm.offset_manager
        decide = offsets.cleanup_expired_offsets
        store_clock = self.sim.store_world.clock

        def cleanup(group_id: str, now_ms: int, records: list[Any]) -> bool:
            start = len(records)
            out = decide(group_id, now_ms, records)
            for record in records[start:]:
                key = record.key
                value = offsets.offsets[group_id][key.topic][key.partition]
                self.expired.append(
                    (
                        group_id,
                        key.topic,
                        key.partition,
                        value.offset,
                        store_clock.now_ms(),
                        now_ms,
                        process,
                    )
                )
            return out

        offsets.cleanup_expired_offsets = cleanup  # type: ignore[method-assign]

    def check(self) -> None:
        retention = self.retention_ms
        if retention is None:
            return
        sim = self.sim
        for group, topic, part, offset, store_ms, decided_ms, process in self.expired[
            self._checked :
        ]:
            sim.coverage.hit("retention", "offset expired" + (" (solo)" if group == SOLO else ""))
            if offset not in self.sent:
                continue
            sent, sent_at = self.sent[offset]
            age = store_ms - sent
            # the store's clock jumps a shard may not have followed yet when it stamped it
            since = sent_at - (CLOCK_SYNC_INTERVAL_MS + StoreTime.MAX_RTT_MS) / 1000
            unfollowed = sum(ms for at, ms in self.store_jumps if at >= since)
            if unfollowed:
                sim.coverage.hit("retention", "offset expired after a store clock jump")
            if age < retention - SYNC_ERROR_MS - unfollowed:
                sim.violation(
                    f"offset expired early: {group} {topic}-{part} offset {offset} was sent at "
                    f"store time {sent} and expired on {process} at store time {store_ms}, "
                    f"{age} ms later (retention {retention} ms; that shard's clock said "
                    f"{decided_ms}, {decided_ms - store_ms:+d} ms off the store's)"
                )
        self._checked = len(self.expired)

    async def solo(self) -> None:
        """The standalone consumer: commits two partitions of ``t0`` every 0.3-1.5 s for
        1-6 s, then stops (its offsets and then its group expire)."""
        sim, rng = self.sim, self.rng
        stop = rng.uniform(1, 6)
        await asyncio.sleep(rng.uniform(0.3, 1.0))
        while sim.loop.now < stop:
            parts = sorted(rng.sample(range(4), 2))
            values = {p: self.next_offset() for p in parts}
            req = api.OffsetCommitRequest(
                SOLO,
                -1,
                "",
                None,
                topics=(
                    api.OffsetCommitRequestTopic(
                        "t0", tuple(api.OffsetCommitRequestPartition(p, values[p]) for p in parts)
                    ),
                ),
            )
            target = sim.route(_Solo())
            if target is not None and target.alive:
                try:
                    resp = await sim.ask(target, target.service.offset_commit(req), 3)
                except (StoreError, TimeoutError):
                    sim.coverage.hit("retention", "solo commit failed")
                else:
                    self._answered(resp, values)
            await asyncio.sleep(rng.uniform(0.3, 1.5))

    def _answered(self, resp: Any, values: dict[int, int]) -> None:
        sim = self.sim
        codes = []
        for t in resp.topics:
            for p in t.partitions:
                codes.append(p.error_code)
                sim.coverage.hit("retention", f"solo commit {Errors(p.error_code).name}")
                if p.error_code == 0:
                    sim.acked.append((SOLO, t.name, p.partition_index, values[p.partition_index]))
        sim.trace(f"solo commit {values} -> {codes}")


class _Solo:
    """What routing needs of the standalone consumer: its group."""

    group = SOLO
