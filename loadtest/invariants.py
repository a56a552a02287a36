"""Invariant checkers fed by the simulated members during a run (pure: no I/O, no clock).

* :class:`OwnershipChecker` -- RELIABILITY.md #4 from the clients' side: inside one group no
  topic-partition is owned by two members at the same time. Members report ``acquire`` when
  they start owning a partition (after the coordinator gave it) and ``release`` when they stop
  (after revoking, before acknowledging); a second ``acquire`` while another member holds the
  partition is a violation -- unless the coordinator had fenced the holder (a member that
  does not revoke within its rebalance timeout, or whose session expired, is removed and its
  partitions reassigned: Kafka's rule). The client learns that only later, so such an overlap
  is held as *suspect* until the holder hears from the coordinator: ``fenced`` (its next
  answer is FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION) clears it, counted in
  ``fenced_overlaps``; ``confirmed`` (a successful heartbeat: the coordinator still counts it
  a member) or the end of the run makes it a violation.
* :class:`CommitLedger` -- every acknowledged commit reads back at the end: per key, the stored
  value must be the last acknowledged value, or one sent after it whose outcome is unknown
  (a timeout, a cancelled call, a shard that died after its append).
"""

from __future__ import annotations

from dataclasses import dataclass, field

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Violation:
    kind: str
    group: str
    detail: str
    at_s: float | None = None

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "group": self.group, "detail": self.detail, "at_s": self.at_s}


class OwnershipChecker:
    def __init__(self) -> None:
        #: (group, topic, partition) -> member owning it now
        self.owner: dict[tuple[str, str, int], str] = {}
        self.violations: list[Violation] = []
        #: (group, stale holder) -> overlaps not yet explained by the holder being fenced
        self.suspect: dict[tuple[str, str], list[Violation]] = {}
        self.fenced_overlaps = 0
        self.acquired = 0
        self.released = 0

    def acquire(self, group: str, member: str, tp: TopicPartition, at_s: float) -> None:
        key = (group, tp[0], tp[1])
        holder = self.owner.get(key)
        if holder is not None and holder != member:
            self.suspect.setdefault((group, holder), []).append(
                Violation(
                    "double-ownership",
                    group,
                    f"{tp[0]}-{tp[1]} given to {member} while {holder} still owns it",
                    at_s,
                )
            )
        self.owner[key] = member
        self.acquired += 1

    def fenced(self, group: str, member: str) -> None:
        """The coordinator told ``member`` it is no longer a member: what was given away
        meanwhile was given away legitimately."""
        self.fenced_overlaps += len(self.suspect.pop((group, member), []))

    def confirmed(self, group: str, member: str) -> None:
        """A successful heartbeat of ``member``: it is still a member, so a partition it
        owned that went to another member went there too early."""
        self.violations += self.suspect.pop((group, member), [])

    def finish(self) -> list[Violation]:
        """At the end of the run: overlaps never explained by fencing are violations."""
        for key in sorted(self.suspect):
            self.violations += self.suspect.pop(key)
        return self.violations

    def release(self, group: str, member: str, tp: TopicPartition, at_s: float) -> None:
        key = (group, tp[0], tp[1])
        if self.owner.get(key) == member:
            del self.owner[key]
            self.released += 1

    def owned_by(self, group: str) -> dict[TopicPartition, str]:
        return {(t, p): m for (g, t, p), m in self.owner.items() if g == group}


@dataclass
class KeyLedger:
    acked: int | None = None
    #: values sent since the last acknowledgement whose outcome is not known
    unknown: list[int] = field(default_factory=list)


class CommitLedger:
    def __init__(self) -> None:
        self.keys: dict[tuple[str, str, int], KeyLedger] = {}
        self.acked = 0

    def sent(self, group: str, tp: TopicPartition, value: int) -> None:
        self.keys.setdefault((group, *tp), KeyLedger()).unknown.append(value)

    def acknowledged(self, group: str, tp: TopicPartition, value: int) -> None:
        k = self.keys.setdefault((group, *tp), KeyLedger())
        k.acked = value
        k.unknown = []
        self.acked += 1

    def refused(self, group: str, tp: TopicPartition, value: int) -> None:
        """An answer with an error: not applied (Kafka commits are all-or-nothing per
        partition and answered only once durable)."""
        k = self.keys.setdefault((group, *tp), KeyLedger())
        if value in k.unknown:
            k.unknown.remove(value)

    def groups(self) -> list[str]:
        return sorted({g for g, _, _ in self.keys})

    def check(self, stored: dict[tuple[str, str, int], int]) -> list[Violation]:
        """``stored``: what OffsetFetch returned at the end (absent: nothing committed)."""
        out = []
        for (g, t, p), k in sorted(self.keys.items()):
            if k.acked is None and not k.unknown:
                continue
            got = stored.get((g, t, p))
            allowed = ({k.acked} if k.acked is not None else {None}) | set(k.unknown)
            if got not in allowed:
                out.append(
                    Violation(
                        "commit-lost",
                        g,
                        f"{t}-{p}: stored {got}, last acknowledged {k.acked}, "
                        f"unknown outcome {k.unknown[-5:]}",
                    )
                )
        return out
