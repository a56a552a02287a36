"""Steady heartbeats answered at once: the one decision, and the one memory of its answers.

A KIP-848 member with nothing new to say sends the same heartbeat every few seconds, and a
classic member its Heartbeat: by far the most frequent requests. One site decides whether
such a request is the steady case -- the group managers (``ConsumerGroupManager.
steady_heartbeat``, ``ClassicGroupManager.steady_heartbeat``), with the same checks the
general way takes first -- and gives a :class:`SteadyAnswer`. The coordinator takes that
decision on the group's partition at once (``CoordinatorPartition.answer_now``) under the
runtime's read token, and hands both out as a :class:`SteadyDecision` through its
:class:`SteadyPath`.

Callers that see the same request bytes again (the gRPC servicer, ``groupcoord dev``'s
gateway reading Kafka frames) remember the answer they serialized with the decision in a
:class:`SteadyMemo` and give it again while the token is valid (:meth:`SteadyPath.again`
moves the member's session on, as the decision did). They never decide anything themselves:
what invalidates a token is the runtime's business, said by the results that change state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol


class SteadyAnswer(NamedTuple):
    """A steady ConsumerGroupHeartbeat's answer, and the ids of the member's session (the
    state's own strings: what remembers them shares them)."""

    member_epoch: int
    heartbeat_interval_ms: int
    should_compute_assignment: bool
    group_id: str
    member_id: str


class SteadyDecision(NamedTuple):
    """A :class:`SteadyAnswer` with the read token it was taken under (opaque here: the
    runtime's ``ReadToken``)."""

    answer: SteadyAnswer
    token: Any


class SteadyPath(Protocol):
    """What a coordinator answers at once (``GroupCoordinatorService``'s; a coordinator
    behind an authorizer has none: every request is checked the general way)."""

    def decide(
        self, group_id: str, member_id: str, member_epoch: int, client_id: str, client_host: str
    ) -> SteadyDecision | None:
        """A heartbeat that carries nothing but its ids, epoch and context, when it is the
        steady case (the member's session moved on); None: the general way answers it."""
        ...

    def again(self, token: Any, group_id: str, member_id: str) -> bool:
        """The decision taken under ``token`` for that member, given again while the token
        is valid (the member's session moved on): True; False: decide anew."""
        ...

    def classic(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None
    ) -> int | None:
        """A classic member's Heartbeat answered at once: its error code (NONE or
        REBALANCE_IN_PROGRESS; the session moved on); None: the general way answers it."""
        ...


class _Remembered:
    """One request's serialized answer, the decision's token and session ids, and the peer
    host it was decided for (None: the request names its own host)."""

    __slots__ = ("answer", "token", "group", "member", "peer")

    def __init__(
        self, answer: bytes, token: Any, group: str, member: str, peer: str | None
    ) -> None:
        self.answer = answer
        self.token = token
        self.group = group
        self.member = member
        self.peer = peer


class SteadyMemo:
    """Serialized answers of steady heartbeats, by the request's bytes, given again while the
    decision they were built from holds (``again``: :meth:`SteadyPath.again`).

    Holds at most ``capacity`` requests (~0.28 KB each beside the key's bytes: 279 B
    measured by ``bench.consumer_group.memory``). When full it keeps what it holds (members
    heartbeat in cycles: replacing entries would leave none to hit) until as many requests
    again went unremembered, then starts afresh, so that members that left give their places
    up. ``capacity`` 0: nothing is remembered."""

    __slots__ = ("_again", "_capacity", "_entries", "_unremembered")

    def __init__(self, again: Callable[[Any, str, str], bool], capacity: int) -> None:
        self._again = again
        self._capacity = capacity
        self._entries: dict[bytes, _Remembered] = {}
        self._unremembered = 0

    def __len__(self) -> int:
        return len(self._entries)

    def answer(self, key: bytes, host: str) -> bytes | None:
        """The answer remembered for ``key`` when it was decided for ``host`` (or names its
        own) and its decision holds still; None: decide anew."""
        known = self._entries.get(key)
        if (
            known is not None
            and (known.peer is None or known.peer == host)
            and self._again(known.token, known.group, known.member)
        ):
            return known.answer
        return None

    def remember(
        self, key: bytes, answer: bytes, decision: SteadyDecision, peer: str | None
    ) -> None:
        """Remember ``answer``, serialized from ``decision``, for ``key`` (``peer``: the host
        it was decided for when the request names none)."""
        entries = self._entries
        known = entries.get(key)
        decided = decision.answer
        if known is not None:
            known.answer, known.token, known.peer = answer, decision.token, peer
            known.group, known.member = decided.group_id, decided.member_id
            return
        if len(entries) >= self._capacity:
            self._unremembered += 1
            if self._unremembered < self._capacity or not self._capacity:
                return
            entries.clear()
            self._unremembered = 0
        entries[key] = _Remembered(
            answer, decision.token, decided.group_id, decided.member_id, peer
        )
