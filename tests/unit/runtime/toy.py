"""The runtime's toy state machine for the runtime's tests (and the ownership manager's):
a map of counters (``Counter``) whose records a JSON codec writes, and a runtime on a store's
clock."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from shards.runtime.contract import CoordinatorResult, Deferred, Record
from shards.runtime.runtime import CoordinatorRuntime
from shards.storage.memory import InMemoryLogStore


@dataclass(frozen=True)
class Key:
    name: str


class JsonCodec:
    """Toy codec: records are (str key, int|None value) pairs in JSON."""

    def encode_batch(self, records: list[Record], timestamp_ms: int) -> bytes:
        return json.dumps([[r.key.name, r.value] for r in records]).encode()

    def decode_batch(self, data: bytes) -> list[Record]:
        return [Record(Key(k), v) for k, v in json.loads(data)]

    def encode_snapshot(self, records: list[Record], last_offset: int) -> bytes:
        return self.encode_batch(records, 0)

    def decode_snapshot(self, data: bytes) -> list[Record]:
        return self.decode_batch(data)


class Counter:
    """Toy state machine: a map of counters; `incr` reads then writes (ordering-sensitive)."""

    def __init__(self, partition: int, timer: Any) -> None:
        self.values: dict[str, int] = {}
        self.timer = timer
        self.replayed = 0
        self.loaded_at: int | None = None
        self.parked: Deferred | None = None

    def replay(self, record: Record) -> None:
        self.replayed += 1
        if record.value is None:
            self.values.pop(record.key.name, None)
        else:
            self.values[record.key.name] = record.value

    def snapshot(self) -> list[Record]:
        return [Record(Key(k), v) for k, v in self.values.items()]

    def on_loaded(self, now_ms: int) -> None:
        self.loaded_at = now_ms

    def on_unloaded(self) -> None:
        pass

    # handlers
    def incr(self, name: str) -> CoordinatorResult[int]:
        value = self.values.get(name, 0) + 1
        return CoordinatorResult([Record(Key(name), value)], value)

    def incr_applied(self, name: str) -> CoordinatorResult[int]:
        """Applies its own record (as a classic-group handler does): not to be replayed."""
        value = self.values[name] = self.values.get(name, 0) + 1
        return CoordinatorResult([Record(Key(name), value)], value, replay_records=False)

    def park(self) -> CoordinatorResult[Any]:
        self.parked = Deferred("park")
        return CoordinatorResult([], self.parked)

    def unpark(self, value: int) -> CoordinatorResult[Any]:
        assert self.parked is not None
        token, self.parked = self.parked, None
        return CoordinatorResult([Record(Key("unparked"), value)], "ok", [(token, value)])


def make_runtime(store: InMemoryLogStore, **kw: Any) -> CoordinatorRuntime:
    """A runtime on the store's clock (leases and the runtime's waits move together)."""
    return CoordinatorRuntime(store, JsonCodec(), Counter, owner="test", clock=store.clock, **kw)
