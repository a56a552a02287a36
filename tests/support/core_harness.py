"""Drive the pure core the way Kafka's GroupMetadataManagerTestContext does: a manual clock,
a timer that fires only on ``sleep``, and a log of every record written.

    h = ShardHarness(CoordinatorConfig(...))
    resp = h.write(lambda shard, now: shard.commit_offset(request, now))
    h.sleep(45_000)            # advances time, fires due timers as writes, in order
    h.assert_replay_equals_live()

Deferred responses (classic JoinGroup) come back as ``Pending`` objects whose ``.value`` is set
when a later write completes them. Async tasks (target assignments) queue up in
``h.tasks``; ``h.run_tasks(execute)`` runs them (in order, or a test picks which) and applies
``on_done`` as a write -- so a test can deliver a stale result on purpose. As in a shard
process, small target assignments are computed inside the operation with the real in-process
assignors (``CoordinatorConfig.consumer_group_inline_assignment_max_size``; 0 sends every one
through ``h.tasks``).
"""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from services.shard.assignor_executor import InProcessAssignor
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.state_machine import CoordinatorStateMachine
from shards.core.topics import TopicsImage
from shards.runtime.contract import (
    AsyncTask,
    CoordinatorResult,
    Deferred,
    KeyedTimerOp,
    Record,
    TimerKey,
    TimerOp,
)

START_MS = 1_700_000_000_000
_ASSIGNORS: dict[tuple[str, ...], InProcessAssignor] = {}


def at_once(**settings: Any) -> CoordinatorConfig:
    """A CoordinatorConfig whose consumer and streams groups get a new target at once
    (assignment intervals 0, no streams initial rebalance delay, as Kafka before 4.4): the
    state-machine tests check what follows from each target;
    ``tests/unit/core/consumer/test_assignment_interval.py`` and
    ``tests/unit/core/streams/test_assignment_delays.py`` check the delays themselves and
    Kafka 4.4's defaults (1 s; streams: 3 s and 1 s)."""
    settings.setdefault("consumer_group_assignment_interval_ms", 0)
    settings.setdefault("streams_group_assignment_interval_ms", 0)
    settings.setdefault("streams_group_initial_rebalance_delay_ms", 0)
    return CoordinatorConfig(**settings)


def in_process_assignor(config: CoordinatorConfig) -> InProcessAssignor:
    """The real assignors a shard process runs (loaded once per list of names)."""
    names = tuple(config.consumer_group_assignors)
    if names not in _ASSIGNORS:
        _ASSIGNORS[names] = InProcessAssignor(names)
    return _ASSIGNORS[names]


class ManualTimer:
    """The core's Timer for tests: keyed, replaceable, fires only when the harness sleeps.
    ``tasks``: key -> (deadline, scheduling order, op to fire, op scheduled, postponed
    deadline or None) -- as PartitionTimer, a postponed timer comes due at its deadline and
    goes back for the later one without firing."""

    def __init__(self) -> None:
        self.tasks: dict[TimerKey, tuple[int, int, TimerOp, Any, int | None]] = {}
        self.now_ms = START_MS
        self._seq = itertools.count()

    def schedule(self, key: TimerKey, delay_ms: int, op: TimerOp) -> None:
        self.tasks[key] = (self.now_ms + delay_ms, next(self._seq), op, op, None)

    def schedule_keyed(self, key: TimerKey, delay_ms: int, op: KeyedTimerOp) -> None:
        self.tasks[key] = (
            self.now_ms + delay_ms,
            next(self._seq),
            functools.partial(op, key),
            op,
            None,
        )

    def postpone(self, key: TimerKey, delay_ms: int, op: Any) -> bool:
        task = self.tasks.get(key)
        if task is None or task[3] is not op or self.now_ms + delay_ms < task[0]:
            return False
        later = self.now_ms + delay_ms
        self.tasks[key] = (*task[:4], later if later > task[0] else None)
        return True

    def cancel(self, key: TimerKey) -> None:
        self.tasks.pop(key, None)

    def is_scheduled(self, key: TimerKey) -> bool:
        return key in self.tasks

    def deadline(self, key: TimerKey) -> int | None:
        task = self.tasks.get(key)
        if task is None:
            return None
        return task[0] if task[4] is None else task[4]

    def pop_due(self, now_ms: int) -> tuple[int, TimerKey, TimerOp] | None:
        while True:
            due = [(d, s, k) for k, (d, s, *_) in self.tasks.items() if d <= now_ms]
            if not due:
                return None
            deadline, _, key = min(due)
            _, _, op, scheduled, later = self.tasks.pop(key)
            if later is None:
                return deadline, key, op
            self.tasks[key] = (later, next(self._seq), op, scheduled, None)  # not fired


@dataclass
class Pending:
    """A deferred response; ``done``/``value`` are set when a later write completes it."""

    token: Deferred
    done: bool = False
    value: Any = None


def seeded_uuids(seed: int = 0) -> Callable[[], bytes]:
    """A deterministic source of generated ids for the core (production injects uuid4)."""
    rng = random.Random(seed)
    return lambda: rng.randbytes(16)


@dataclass
class ShardHarness:
    config: CoordinatorConfig = field(default_factory=at_once)
    topics: TopicsImage = field(default_factory=TopicsImage)
    partition: int = 0

    def __post_init__(self) -> None:
        self.uuids = seeded_uuids()
        self.timer = ManualTimer()
        self.shard = self.new_shard(self.timer)
        self.log: list[Record] = []
        self.pending: dict[int, Pending] = {}
        self.fired: list[tuple[TimerKey, CoordinatorResult[Any]]] = []
        self.tasks: dict[TimerKey, AsyncTask] = {}  # key -> newest task (newer supersedes)
        self.tasks_asked = 0  # every task a result asked for (superseded ones included)

    def new_shard(self, timer: Any) -> CoordinatorStateMachine:
        """A shard as a process builds one (the in-process assignors injected)."""
        return CoordinatorStateMachine(
            self.config,
            timer,
            self.topics,
            self.partition,
            assign=in_process_assignor(self.config),
            new_uuid=self.uuids,
        )

    @property
    def now(self) -> int:
        return self.timer.now_ms

    def _apply(self, result: CoordinatorResult[Any]) -> Any:
        if result.replay_records:  # as the runtime does
            for record in result.records:
                self.shard.replay(record)
        self.log.extend(result.records)
        for token, value in result.completions:
            p = self.pending.get(token.id)
            if p is not None:
                p.done, p.value = True, value
        for task in result.tasks:
            self.tasks_asked += 1
            self.tasks.pop(task.key, None)
            self.tasks[task.key] = task
        if isinstance(result.response, Deferred):
            p = Pending(result.response)
            self.pending[result.response.id] = p
            return p
        return result.response

    def write(self, op: Callable[[CoordinatorStateMachine, int], CoordinatorResult[Any]]) -> Any:
        return self._apply(op(self.shard, self.now))

    def read(self, op: Callable[[CoordinatorStateMachine, int], Any]) -> Any:
        return op(self.shard, self.now)

    def sleep(self, ms: int) -> list[tuple[str, CoordinatorResult[Any]]]:
        """Advance the clock by ``ms``, firing every timer that falls due, in deadline order."""
        target = self.now + ms
        fired = []
        while True:
            due = self.timer.pop_due(target)
            if due is None:
                break
            deadline, key, op = due
            # the timer fires at its own deadline (time moves forward only)
            self.timer.now_ms = max(self.timer.now_ms, deadline)
            result = op(self.now)
            self._apply(result)
            fired.append((key, result))
        self.timer.now_ms = target
        self.fired.extend(fired)
        return fired

    def run_tasks(self, execute: Callable[[Any], Any], keys: list[TimerKey] | None = None) -> int:
        """Run queued async tasks (all, or the given keys) and apply their on_done writes.
        All: also the tasks those answers ask for (an answer found stale asks for the group as
        it is now: one computation in flight per group), until none is queued."""
        ran = 0
        for _ in range(100):
            for key in list(self.tasks) if keys is None else keys:
                task = self.tasks.pop(key)
                try:
                    answer = execute(task.request)
                except Exception as ex:
                    answer = ex
                self._apply(task.on_done(answer, self.now))
                ran += 1
            if keys is not None or not self.tasks:
                return ran
        raise AssertionError("target assignment tasks keep asking for more")

    def update_topics(self, image: TopicsImage) -> None:
        self.topics = image
        self.write(lambda shard, now: shard.update_topics(image, now))

    # ---- invariants ---------------------------------------------------------------------
    def replayed(self, records: list[Record] | None = None) -> CoordinatorStateMachine:
        fresh = CoordinatorStateMachine(
            self.config, ManualTimer(), self.topics, self.partition, new_uuid=self.uuids
        )
        for record in self.log if records is None else records:
            fresh.replay(record)
        return fresh

    def assert_replay_equals_live(self) -> None:
        live = self.shard.fingerprint()
        assert self.replayed().fingerprint() == live, "replaying the log differs from live state"
        assert self.replayed(self.shard.snapshot()).fingerprint() == live, (
            "replaying the snapshot differs from live state"
        )
