"""PartitionTimer's member buckets: a member's key ``(kind, group, member)`` scheduled keyed
waits in its group's bucket, not in an entry of its own -- and every key fires exactly when
and as often as it would with an entry of its own (a model of the timers, checked after
every step of random schedules, postponements, cancels and clock moves)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shards.clock import ManualClock
from shards.runtime.contract import CoordinatorResult, TimerKey
from shards.runtime.timers import PartitionTimer
from tests.support.properties import examples


class _Partition:
    """What PartitionTimer needs of its partition: a clock, and firing as an operation."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.fired: list[tuple[TimerKey, int]] = []
        self.during: list[Any] = []  # what each firing does to the timer meanwhile

    def fire_timer(self, key: TimerKey, op: Any) -> None:
        self.fired.append((key, self.clock.monotonic_ms()))
        op(self.clock.now_ms())


def _timer() -> tuple[PartitionTimer, _Partition]:
    partition = _Partition()
    return PartitionTimer(partition), partition  # type: ignore[arg-type]


def _session(key: TimerKey, now: int) -> CoordinatorResult[None]:
    return CoordinatorResult()


def _other(key: TimerKey, now: int) -> CoordinatorResult[None]:
    return CoordinatorResult()


# members of two groups (bucketed when scheduled keyed with one op), a kind with another op,
# and keys that never go into a bucket (a group's key, a plain string)
KEYS: list[TimerKey] = [
    *(("session", g, m) for g in ("g0", "g1") for m in ("m0", "m1", "m2")),
    ("other", "g0", "m0"),
    ("join", "g0"),
    "plain",
]
OPS = [_session, _other]
# (deadlines a few hundred ms apart: members often within one lookahead of each other)
DELAYS = st.integers(0, 400)

actions = st.lists(
    st.one_of(
        st.tuples(
            st.just("keyed"),
            st.integers(0, len(KEYS) - 1),
            DELAYS,
            st.integers(0, 1),
        ),
        st.tuples(st.just("plain"), st.integers(0, len(KEYS) - 1), DELAYS),
        st.tuples(st.just("move"), st.integers(0, 5), DELAYS),
        st.tuples(
            st.just("postpone"),
            st.integers(0, len(KEYS) - 1),
            DELAYS,
            st.integers(0, 1),
        ),
        st.tuples(st.just("cancel"), st.integers(0, len(KEYS) - 1)),
        st.tuples(st.just("advance"), st.integers(1, 300)),
    ),
    max_size=60,
)


@settings(max_examples=examples(1000), deadline=None)
@given(actions)
def test_keys_fire_when_and_as_often_as_with_an_entry_each(steps: list[tuple[Any, ...]]) -> None:
    timer, partition = _timer()
    clock = partition.clock
    # the model: key -> (deadline, op)
    expected: dict[TimerKey, tuple[int, Any]] = {}

    def plain_op(now: int) -> CoordinatorResult[None]:
        return CoordinatorResult()

    for step in [*steps, ("advance", 10_000)]:
        now = clock.monotonic_ms()
        kind = step[0]
        if kind == "keyed":
            key, op = KEYS[step[1]], OPS[step[3]]
            timer.schedule_keyed(key, step[2], op)
            expected[key] = (now + step[2], op)
        elif kind == "plain":
            key = KEYS[step[1]]
            timer.schedule(key, step[2], plain_op)
            expected[key] = (now + step[2], plain_op)
        elif kind == "move":  # a session's heartbeat: postpone, else schedule
            key = KEYS[step[1]]
            if not timer.postpone(key, step[2], _session):
                timer.schedule_keyed(key, step[2], _session)
            expected[key] = (now + step[2], _session)
        elif kind == "postpone":
            key, op = KEYS[step[1]], OPS[step[3]]
            moved = timer.postpone(key, step[2], op)
            known = expected.get(key)
            if known is None or known[1] is not op:
                assert moved is False
            elif now + step[2] >= known[0]:
                assert moved is True
            if moved:  # (an earlier deadline may be refused: the caller schedules then)
                expected[key] = (now + step[2], op)
        elif kind == "cancel":
            timer.cancel(KEYS[step[1]])
            expected.pop(KEYS[step[1]], None)
        else:
            partition.fired.clear()
            clock.advance(step[1])
            due = sorted(
                ((k, d) for k, (d, _) in expected.items() if d <= clock.monotonic_ms()),
                key=lambda kd: kd[1],
            )
            fired = partition.fired
            assert sorted(fired, key=repr) == sorted(due, key=repr)  # each once, on time
            assert [t for _, t in fired] == sorted(t for _, t in fired)  # in deadline order
            for k, _ in due:
                del expected[k]
        for key in KEYS:
            assert timer.is_scheduled(key) == (key in expected)
            assert timer.deadline(key) == (expected[key][0] if key in expected else None)
        assert sorted(timer.keys(), key=repr) == sorted(expected, key=repr)
    assert clock.pending() == [] and timer._heap == []


def test_a_group_heartbeating_holds_one_heap_entry_and_no_entry_per_member() -> None:
    timer, partition = _timer()
    clock = partition.clock
    members = [("session", "g", f"m{i}") for i in range(1_000)]
    for key in members:
        timer.schedule_keyed(key, 45_000, _session)
    for _ in range(60):  # ten minutes of heartbeats every 10 s
        clock.advance(10_000)
        for key in members:
            assert timer.postpone(key, 45_000, _session)
    assert partition.fired == [] and timer._entries == {}
    assert len(timer._heap) == 1 and timer._buckets == 1
    clock.advance(45_000)
    assert sorted(k for k, _ in partition.fired) == sorted(members)
    assert timer.keys() == [] and timer._groups == {"session": {}} and clock.pending() == []


def test_members_expiring_one_by_one_are_looked_over_once_per_lookahead(
    monkeypatch: Any,
) -> None:
    # 2,000 members whose sessions end 1 ms apart: each fires on time, in order, and the
    # bucket is looked over about once per LOOKAHEAD_MS, not once per expiry
    timer, partition = _timer()
    clock = partition.clock
    opened: list[int] = []
    real_open = timer._open
    monkeypatch.setattr(
        timer, "_open", lambda bucket, before: (opened.append(1), real_open(bucket, before))
    )
    members = [("session", "g", f"m{i:04d}") for i in range(2_000)]
    start = clock.monotonic_ms()
    for i, key in enumerate(members):
        timer.schedule_keyed(key, 1_000 + i, _session)
    clock.advance(5_000)
    assert partition.fired == [(key, start + 1_000 + i) for i, key in enumerate(members)]
    assert len(opened) <= 2_000 // PartitionTimer.LOOKAHEAD_MS + 2


def test_ties_fire_in_scheduling_order_across_buckets_and_entries() -> None:
    timer, partition = _timer()

    def plain(now: int) -> CoordinatorResult[None]:
        return CoordinatorResult()

    order: list[TimerKey] = [
        ("session", "g1", "b"),
        ("join", "g0"),
        ("session", "g0", "a"),
        ("other", "g0", "a"),
        ("session", "g1", "a"),
    ]
    for key in order:
        if key[0] == "join":
            timer.schedule(key, 100, plain)
        else:
            timer.schedule_keyed(key, 100, _other if key[0] == "other" else _session)
    partition.clock.advance(100)
    assert [k for k, _ in partition.fired] == order


def test_a_member_scheduled_while_timers_fire_waits_for_the_next_callback() -> None:
    timer, partition = _timer()
    clock = partition.clock
    later = ("session", "g", "later")

    def rejoin(key: TimerKey, now: int) -> CoordinatorResult[None]:
        timer.schedule_keyed(later, 0, _session)  # (delay 0: still the next callback)
        return CoordinatorResult()

    timer.schedule_keyed(("session", "g", "first"), 5, rejoin)  # (another op: an entry)
    timer.schedule_keyed(("session", "h", "second"), 5, _session)
    assert clock.advance(5) == 2  # one callback for the two due, one for the one scheduled
    assert [k for k, _ in partition.fired] == [
        ("session", "g", "first"),
        ("session", "h", "second"),
        later,
    ]
    assert timer.keys() == [] and clock.pending() == []


def test_a_postponed_member_in_an_entry_of_its_own_goes_back_into_its_bucket() -> None:
    # members due within the lookahead get entries of their own; one that then heartbeats
    # goes back into the bucket when its entry comes due, without firing
    timer, partition = _timer()
    clock = partition.clock
    a, b, c = (("session", "g", m) for m in "abc")
    timer.schedule_keyed(a, 100, _session)  # (the group's first: an entry of its own)
    timer.schedule_keyed(b, 150, _session)  # (the second: both into a bucket)
    timer.schedule_keyed(c, 2_000, _session)
    assert timer._entries == {} and timer._groups["session"]["g"].orders.keys() == {*"abc"}
    clock.advance(100)
    assert partition.fired == [(a, clock.monotonic_ms())]
    assert b in timer._entries  # within 250 ms of a, looked over with it: its own entry now
    assert timer.postpone(b, 1_000, _session)
    clock.advance(50)  # its first deadline: back into the bucket, no firing
    assert len(partition.fired) == 1 and b not in timer._entries
    assert timer._groups["session"]["g"].orders.keys() == {"b", "c"}
    assert timer.deadline(b) == clock.monotonic_ms() - 50 + 1_000
    clock.advance(949)
    assert len(partition.fired) == 1
    clock.advance(1)
    assert partition.fired[1] == (b, clock.monotonic_ms())
    timer.cancel(c)
    assert timer.keys() == [] and timer._groups == {"session": {}} and timer._buckets == 0


def test_a_group_with_one_member_timer_has_no_bucket() -> None:
    # a bucket costs more than one entry: the group's first member has an entry of its own,
    # the second brings both into a bucket; a member left alone goes on where it is
    timer, partition = _timer()
    a, b = ("session", "g", "a"), ("session", "g", "b")
    timer.schedule_keyed(a, 100, _session)
    assert a in timer._entries and timer._groups == {"session": {"g": "a"}}
    assert timer.postpone(a, 300, _session)  # (postponed in its entry)
    timer.schedule_keyed(b, 200, _session)
    assert timer._entries == {} and timer._buckets == 1
    assert timer.deadline(a) == partition.clock.monotonic_ms() + 300
    timer.cancel(b)
    assert timer._groups["session"]["g"].orders.keys() == {"a"}
    partition.clock.advance(300)
    assert [k for k, _ in partition.fired] == [a] and timer.keys() == []
    timer.schedule_keyed(b, 100, _session)  # alone again: an entry of its own
    assert b in timer._entries and timer._groups == {"session": {"g": "b"}}


def test_a_member_back_from_its_own_entry_fires_before_the_rest_of_its_bucket() -> None:
    timer, partition = _timer()
    clock = partition.clock
    a, b, c = (("session", "g", m) for m in "abc")
    start = clock.monotonic_ms()
    timer.schedule_keyed(a, 100, _session)
    timer.schedule_keyed(b, 150, _session)  # looked over with a: an entry of its own
    timer.schedule_keyed(c, 500, _session)  # stays in the bucket, which waits for 500
    clock.advance(100)
    assert timer.postpone(b, 120, _session)  # to 220: before the bucket's next look
    clock.advance(400)
    assert partition.fired == [(a, start + 100), (b, start + 220), (c, start + 500)]
