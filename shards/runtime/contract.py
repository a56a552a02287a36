"""The contract between a coordinator state machine and the runtime that drives it.

It lives in the runtime, as Kafka's ``CoordinatorResult``, ``CoordinatorShard`` and
``CoordinatorTimer`` live in ``coordinator-common``: the core (``shards.core``) imports it,
the runtime needs nothing of the core to drive a state machine. Pure: plain data and
protocols, no asyncio, no I/O (the layering test holds it to that).

A :class:`Record` is a key and a value (Kafka's ``CoordinatorRecord``); a ``None`` value is a
tombstone that deletes the key. The runtime treats both as opaque: the state machine replays
them, the codec it is given turns them into bytes (the core's key and value types:
:mod:`shards.core.records`).

A handler returns a :class:`CoordinatorResult`: records to append, and the response. The
runtime replays the records, appends them, and hands the response back only once the append
is durable. Some responses cannot be given at once (a classic JoinGroup waits for the other
members): the handler then returns a :class:`Deferred` as its response and keeps the token;
a later operation completes it by listing ``(token, response)`` in ``completions`` -- again
released only once that later operation's records are durable.

Work that must not run on the partition loop (computing a target assignment, possibly on a
remote assignor service) is an :class:`AsyncTask` in ``tasks``: the runtime hands its
``request`` to an executor off the loop and, when the answer arrives, runs
``on_done(answer_or_exception, now_ms)`` as a write operation -- which must check that the
answer is still wanted (e.g. drop an assignment computed for an older group epoch). A newer
task with the same key supersedes an older one that has not finished.

Replay: by default the runtime replays a result's records into the state machine before
it appends them, since handlers do not change state. A handler that has already applied
what its records say -- a classic group's handlers change the (soft) group in place and
write a GroupMetadata record of it, as Kafka's do -- returns ``replay_records=False`` (Kafka's
``CoordinatorResult.replayRecords``): the records are appended but not replayed. Either way
the records are what a load replays, so a load rebuilds the same state; and a failed append
discards whatever the handler applied along with everything else (the partition reloads).

Answers given at once: a question that writes nothing (is this heartbeat the steady case?)
may be answered without a future while nothing undurable could change its answer, and the
answer may be given again while the runtime's *read token* it was taken under stays valid.
What invalidates the token is said where results are produced: every result does, unless it
says ``changes_answers=False`` (it changes only what no such answer reads: offsets).

Timers (session timeouts, rebalance timeouts, offset expiration) go through the
:class:`Timer` the runtime gives the state machine. They are keyed: scheduling a key that
is already scheduled replaces it. A timer fires as a write operation: its callback gets
``now_ms`` and returns a CoordinatorResult like any handler.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

R = TypeVar("R")


class Record(NamedTuple):
    key: Any
    value: Any  # None = tombstone


_deferred_ids = itertools.count(1)


class Deferred:
    """A response that a later operation will complete (or that fails on unload)."""

    __slots__ = ("id", "name")

    def __init__(self, name: str = "") -> None:
        self.id = next(_deferred_ids)
        self.name = name

    def __repr__(self) -> str:
        return f"Deferred({self.id}, {self.name!r})"


#: a timer's (or an AsyncTask's) key: a tuple of strings (the scheme:
#: :mod:`shards.core.timer_keys`). Tuples of strings, so that any two keys compare: the
#: runtime's timer heap compares keys when two entries tie on (deadline, scheduling order)
TimerKey = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AsyncTask:
    key: TimerKey
    request: Any
    on_done: Callable[[Any, int], CoordinatorResult[Any]]


@dataclass(slots=True)
class CoordinatorResult(Generic[R]):
    records: Sequence[Record] = ()
    response: R | Deferred | None = None
    completions: Sequence[tuple[Deferred, Any]] = field(default_factory=tuple)
    tasks: Sequence[AsyncTask] = field(default_factory=tuple)
    #: False: the handler already applied what ``records`` say; the runtime appends them
    #: without replaying them (Kafka's replayRecords)
    replay_records: bool = True
    #: False: nothing this result did changes what an answer given at once reads (the
    #: runtime's read tokens stay valid, and such answers may overtake its records while they
    #: become durable). Only the handler that produced the result can know: the default is
    #: True, so a result that says nothing invalidates. Offset commits say False.
    changes_answers: bool = True


TimerOp = Callable[[int], CoordinatorResult[Any]]
#: an op shared by many timers, told which key fired: ``op(key, now_ms)``
KeyedTimerOp = Callable[[TimerKey, int], CoordinatorResult[Any]]


class Timer(Protocol):
    """Keyed timers owned by the runtime; a firing runs ``op(now_ms)`` as a write op."""

    def schedule(self, key: TimerKey, delay_ms: int, op: TimerOp) -> None: ...

    def schedule_keyed(self, key: TimerKey, delay_ms: int, op: KeyedTimerOp) -> None:
        """``schedule`` with an op that takes the key first: no closure per timer (a
        member's session timer, one per member)."""
        ...

    def postpone(self, key: TimerKey, delay_ms: int, op: Any) -> bool:
        """Move ``key``'s timer, scheduled with ``op``, to fire in ``delay_ms`` when that is
        no earlier than it fires now: True; the timer then comes due at its deadline and
        waits on without firing. False, nothing changed: no such timer, or an earlier
        deadline (schedule it then). A heartbeat's session: no new timer, no firing."""
        ...

    def cancel(self, key: TimerKey) -> None: ...

    def is_scheduled(self, key: TimerKey) -> bool: ...


class StateMachine(Protocol):
    """What the runtime needs from a partition's state machine."""

    def replay(self, record: Record) -> None: ...

    def snapshot(self) -> list[Record]:
        """Records that, replayed into a fresh state machine, rebuild this state."""
        ...

    def on_loaded(self, now_ms: int) -> None:
        """Called once the log is replayed: schedule timers for the loaded state."""
        ...

    def on_unloaded(self) -> None: ...
