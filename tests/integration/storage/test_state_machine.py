"""The store contract as a hypothesis state machine, run against every real backend.

Two store instances (two connections) play the owners. Rules: append by the current owner
(single or as a concurrent burst), append or snapshot with a wrong epoch (stale, zero,
future), acquire by either instance, snapshot at any valid offset, and close/reopen an
instance. The model is the list of acknowledged appends; after every step the loaded log must
equal it exactly: newest snapshot plus the entries after it, offsets increasing and never
reused, and no rejected payload anywhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from shards.storage import FencedError, LogStore, Snapshot, open_store
from shards.storage.memory import InMemoryLogStore, MemoryData
from tests.integration.storage.conftest import BACKENDS, fresh_url, server_url
from tests.support.machines import machine_settings

T = TypeVar("T")

PARTITION = 7
LEASE_MS = 60_000
SETTINGS = machine_settings(50, 30)


class StoreMachine(RuleBasedStateMachine):
    """Subclasses say where fresh storage comes from (``new_url``)."""

    def new_url(self) -> str:
        raise NotImplementedError

    def new_store(self) -> LogStore:
        return open_store(self.url)

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.url = self.new_url()
        self.stores: list[LogStore] = [self.new_store(), self.new_store()]
        for store in self.stores:
            self.run(store.start())
        # The model.
        self.epoch = 0
        self.holder: int | None = None  # which instance holds self.epoch
        self.history: list[tuple[int, bytes]] = []  # every acknowledged append, never trimmed
        self.snapshot: Snapshot | None = None
        self.last_offset = 0
        self.rejected: set[bytes] = set()
        self.counter = 0

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def payload(self, data: bytes) -> bytes:
        self.counter += 1
        return b"%d:" % self.counter + data  # unique, so a rejected one is recognisable

    def wrong_epoch(self, kind: str) -> int:
        if kind == "stale" and self.epoch > 1:
            return self.epoch - 1
        return 0 if kind == "zero" else self.epoch + 1

    def state_up_to(self, offset: int) -> bytes:
        return b"|".join(data for o, data in self.history if o <= offset)

    # ---- rules -------------------------------------------------------------------------
    @rule(who=st.sampled_from([0, 1]))
    def acquire(self, who: int) -> None:
        epoch = self.run(self.stores[who].acquire(PARTITION, f"owner-{who}", LEASE_MS))
        assert epoch == self.epoch + 1
        self.epoch, self.holder = epoch, who

    @precondition(lambda self: self.holder is not None)
    @rule(data=st.binary(max_size=40), burst=st.integers(1, 5))
    def append_by_current_owner(self, data: bytes, burst: int) -> None:
        assert self.holder is not None
        store = self.stores[self.holder]
        payloads = [self.payload(data) for _ in range(burst)]

        async def appends() -> list[int]:
            # Concurrent appends of one owner: one group commit, applied in call order.
            return list(
                await asyncio.gather(*(store.append(PARTITION, self.epoch, p) for p in payloads))
            )

        offsets = self.run(appends())
        assert offsets == list(range(self.last_offset + 1, self.last_offset + burst + 1))
        self.history.extend(zip(offsets, payloads, strict=True))
        self.last_offset += burst

    @rule(
        who=st.sampled_from([0, 1]),
        kind=st.sampled_from(["stale", "zero", "future"]),
        data=st.binary(max_size=40),
    )
    def append_with_wrong_epoch(self, who: int, kind: str, data: bytes) -> None:
        payload = self.payload(data)
        epoch = self.wrong_epoch(kind)
        try:
            self.run(self.stores[who].append(PARTITION, epoch, payload))
        except FencedError as e:
            assert (e.epoch, e.current_epoch) == (epoch, self.epoch)
        else:
            raise AssertionError(f"append with {kind} epoch {epoch} was accepted")
        self.rejected.add(payload)

    @precondition(lambda self: self.holder is not None)
    @rule(pick=st.integers(0, 10_000))
    def snapshot_by_current_owner(self, pick: int) -> None:
        assert self.holder is not None
        low = self.snapshot.offset if self.snapshot else 0
        offset = low + pick % (self.last_offset - low + 1)
        snapshot = Snapshot(offset, self.state_up_to(offset))
        self.run(self.stores[self.holder].write_snapshot(PARTITION, self.epoch, snapshot))
        self.snapshot = snapshot

    @precondition(lambda self: self.last_offset > 0)
    @rule(who=st.sampled_from([0, 1]), kind=st.sampled_from(["stale", "zero", "future"]))
    def snapshot_with_wrong_epoch(self, who: int, kind: str) -> None:
        epoch = self.wrong_epoch(kind)
        try:
            self.run(
                self.stores[who].write_snapshot(PARTITION, epoch, Snapshot(self.last_offset, b"x"))
            )
        except FencedError as e:
            assert e.current_epoch == self.epoch
        else:
            raise AssertionError(f"snapshot with {kind} epoch {epoch} was accepted")

    @rule(who=st.sampled_from([0, 1]))
    def reopen(self, who: int) -> None:
        # A new connection for the same owner; it keeps its epoch (fencing is by epoch).
        self.run(self.stores[who].close())
        self.stores[who] = self.new_store()
        self.run(self.stores[who].start())

    # ---- invariants --------------------------------------------------------------------
    @invariant()
    def loaded_log_is_exactly_the_acknowledged_appends(self) -> None:
        for store in self.stores:
            loaded = self.run(store.load(PARTITION))
            assert loaded.snapshot == self.snapshot
            after = self.snapshot.offset if self.snapshot else 0
            expected = [(o, d) for o, d in self.history if o > after]
            entries = [(e.offset, e.data) for e in loaded.entries]
            assert entries == expected
            offsets = [o for o, _ in entries]
            assert offsets == sorted(set(offsets)) and all(o > after for o in offsets)
            assert not self.rejected & {d for _, d in entries}
            assert loaded.last_offset == self.last_offset
        assert self.run(self.stores[0].current_epoch(PARTITION)) == self.epoch

    def teardown(self) -> None:
        for store in self.stores:
            self.run(store.close())
        self.loop.close()


# Not on the Redis Cluster: its scripts are the single Redis's (run here), and a store start
# there (topology, scripts on every primary) made this 2+ minutes; the contract suite covers
# the cluster's routing.
@pytest.mark.parametrize("backend_name", [b for b in BACKENDS if b != "redis-cluster"])
def test_store_contract_state_machine(
    backend_name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    redis_url = server_url(backend_name, request)

    class Machine(StoreMachine):
        def new_url(self) -> str:
            self.memory = MemoryData()
            return fresh_url(backend_name, tmp_path, redis_url)

        def new_store(self) -> LogStore:
            if backend_name == "memory":
                return InMemoryLogStore(self.memory)
            return open_store(self.url)

    run_state_machine_as_test(Machine, settings=SETTINGS)
