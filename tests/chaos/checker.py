"""The nemesis checker: what a run's history (:mod:`tests.chaos.history`), the final state and
the store's logs say about RELIABILITY.md's invariants.

Rules, per single-writer key (the writer's values strictly increase, so a larger value is a
later write):

* **lost**: the final value (read at the end, from a healthy cluster) is below the last
  acknowledged value -- an acknowledged commit is gone, or was superseded by a lower one.
* **invented**: a value (final, or returned by any read) that no writer ever sent for that
  key (``-1``, nothing committed, is allowed before the first acknowledgement only).
* **stale read**: a read that returned less than a value whose commit was acknowledged
  *before the read was sent* (both times on the test's one monotonic clock). A read racing
  a commit may see either value; only what was known acknowledged at sending counts.
* **epochs**: in every offsets partition's log in Redis, offsets increase and entry epochs
  never go down (a stale writer got through), none above the current epoch
  (:meth:`Cluster.epoch_violations`).
* **two writers in one epoch**: each epoch of a partition is acquired by one load; the
  shards log ``partition N: loaded at epoch E``. The same (N, E) loaded twice (two shards,
  or two incarnations) is two writers in one epoch.
* **double ownership** inside a group (Kafka's rule, as the load tester checks it,
  :class:`loadtest.invariants.OwnershipChecker`): a member owns a partition from the
  answer that assigned it until it revoked it (after an answer without it, before its next
  heartbeat acknowledges that) or learnt it was fenced. A partition given to member B while
  member A still owns it is an overlap. It is legitimate only if the coordinator had fenced
  A (session or rebalance timeout: Kafka moves a silent member's partitions without its
  revocation) -- which A learns at its next answer: FENCED_MEMBER_EPOCH /
  UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION clears the overlap; a successful heartbeat of A
  (the coordinator still counted it a member with that partition), or the end of the run,
  makes it a violation.
* **recovery**: for each fault, for each writer and reader, the time from the fault's start
  (and from its end) to the first acknowledged operation that the client *sent* after that
  moment; the run's figure is the largest over the clients.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from loadtest.invariants import OwnershipChecker

LOADED = re.compile(r"partition (\d+): loaded at epoch (\d+)")


#: the checker's counts that must all be 0
VIOLATIONS = ("lost", "stale", "invented", "double_ownership", "epoch_violations", "two_writers")


@dataclass
class Report:
    ops: int = 0
    ok: int = 0
    info: int = 0
    lost: list[str] = field(default_factory=list)
    invented: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    epochs: list[str] = field(default_factory=list)
    two_writers: list[str] = field(default_factory=list)
    double_ownership: list[str] = field(default_factory=list)
    #: overlaps explained by the holder having been fenced (allowed; for information)
    fenced_overlaps: int = 0
    #: fault -> {"from_start": s, "from_end": s, "slowest": process}
    recovery: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: acknowledged commits per key at the end (how much the run exercised)
    acked_commits: int = 0

    @property
    def max_recovery_from_start(self) -> float:
        return max((_inf(r["from_start"]) for r in self.recovery.values()), default=0.0)

    @property
    def max_recovery_from_end(self) -> float:
        return max((_inf(r["from_end"]) for r in self.recovery.values()), default=0.0)

    def counts(self) -> dict[str, Any]:
        return {
            "ops": self.ops,
            "acked_commits": self.acked_commits,
            "lost": len(self.lost),
            "stale": len(self.stale),
            "invented": len(self.invented),
            "double_ownership": len(self.double_ownership),
            "epoch_violations": len(self.epochs),
            "two_writers": len(self.two_writers),
            "max_recovery_from_start_s": _seconds(self.max_recovery_from_start),
            "max_recovery_from_end_s": _seconds(self.max_recovery_from_end),
        }

    def violations(self) -> int:
        counts = self.counts()
        return sum(counts[k] for k in VIOLATIONS)

    def as_dict(self) -> dict[str, Any]:
        return {**self.counts(), "details": asdict(self)}


def _seconds(value: float) -> float | None:
    """None for "never" (JSON has no infinity)."""
    return round(value, 2) if value != float("inf") else None


def _inf(value: float | None) -> float:
    return float("inf") if value is None else value


def _operations(events: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(invoke, completion) pairs; an invoke never completed counts as unknown (info)."""
    invokes: dict[int, dict[str, Any]] = {}
    pairs = []
    for e in events:
        if e["type"] == "invoke":
            invokes[e["id"]] = e
        elif e["type"] in ("ok", "fail", "info"):
            pairs.append((invokes.pop(e["id"]), e))
    pairs += [(i, {**i, "type": "info", "error": "never completed"}) for i in invokes.values()]
    return pairs


def check_offsets(
    pairs: list[tuple[dict[str, Any], dict[str, Any]]],
    final: dict[str, int],
    report: Report,
) -> None:
    sent: dict[str, set[int]] = defaultdict(set)
    #: key -> [(ack time, value)] in time order
    acks: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for invoke, done in pairs:
        if invoke["op"] != "commit":
            continue
        sent[invoke["key"]].add(invoke["value"])
        if done["type"] == "ok":
            acks[invoke["key"]].append((done["t"], invoke["value"]))
    for series in acks.values():
        series.sort()
    report.acked_commits = sum(len(v) for v in acks.values())

    def acked_before(key: str, t: float) -> int:
        series = acks.get(key, [])
        i = bisect.bisect_left(series, (t, -(1 << 62)))
        return max((v for _, v in series[:i]), default=-1)

    for key in sorted(set(sent) | set(final)):
        got = final.get(key, -1)
        last = acked_before(key, float("inf"))
        if got < last:
            report.lost.append(f"{key}: final {got} < last acknowledged {last}")
        if got != -1 and got not in sent[key]:
            report.invented.append(f"{key}: final {got} was never sent")

    for invoke, done in pairs:
        if invoke["op"] != "fetch" or done["type"] != "ok":
            continue
        for key, got in sorted(done["value"].items()):
            if got != -1 and got not in sent[key]:
                report.invented.append(f"{key}: read {got} (never sent) at {done['t']}")
            known = acked_before(key, invoke["t"])
            if got < known:
                report.stale.append(
                    f"{key}: {invoke['process']} sent at {invoke['t']:.3f}, got {got}; "
                    f"{known} was acknowledged before"
                )


def check_ownership(events: Iterable[dict[str, Any]], report: Report) -> None:
    checker = OwnershipChecker()
    for e in events:
        if e["type"] != "own":
            continue
        what, group, member = e["what"], e["group"], e["member"]
        if what == "acquire":
            checker.acquire(group, member, tuple(e["tp"]), e["t"])
        elif what == "release":
            checker.release(group, member, tuple(e["tp"]), e["t"])
        elif what == "fenced":
            checker.fenced(group, member)
        elif what == "confirmed":
            checker.confirmed(group, member)
    report.double_ownership = [f"{v.group}: {v.detail} at {v.at_s:.3f}" for v in checker.finish()]
    report.fenced_overlaps = checker.fenced_overlaps


def check_two_writers(shard_logs: Iterable[str], report: Report) -> None:
    loads: Counter[tuple[int, int]] = Counter()
    for text in shard_logs:
        loads.update((int(p), int(e)) for p, e in LOADED.findall(text))
    report.two_writers = [
        f"partition {p} loaded at epoch {e} {n} times"
        for (p, e), n in sorted(loads.items())
        if n > 1
    ]


def check_recovery(
    events: list[dict[str, Any]],
    pairs: list[tuple[dict[str, Any], dict[str, Any]]],
    report: Report,
    processes: set[str],
) -> None:
    """Per fault: the slowest (client, key) of ``processes`` -- a writer and its key, a
    reader and each group it reads -- to get an operation sent after the fault's start (end)
    acknowledged. Per key, because a reader stuck on one shard's group may meanwhile be
    answered for the others."""
    starts: dict[str, float] = {}
    ends: dict[str, float] = {}
    for e in events:
        if e["type"] == "fault":
            (starts if e["phase"] == "start" else ends)[e["fault"]] = e["t"]
    #: (process, key) -> [(sent, acknowledged)], and when it last sent anything
    oks: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    last_sent: dict[tuple[str, str], float] = {}
    for invoke, done in pairs:
        if invoke["process"] in processes:
            unit = (invoke["process"], invoke["key"])
            last_sent[unit] = max(last_sent.get(unit, 0.0), invoke["t"])
            if done["type"] == "ok":
                oks[unit].append((invoke["t"], done["t"]))
    for series in oks.values():
        series.sort()

    def slowest(at: float) -> tuple[float, str]:
        worst, who = 0.0, ""
        for unit in sorted(last_sent):
            if last_sent[unit] < at:
                continue  # it had stopped before (an idle key's writer): nothing to recover
            series = oks[unit]
            i = bisect.bisect_left(series, (at, -1.0))
            # nothing acknowledged after it at all: never recovered
            acked = min((a for _, a in series[i:]), default=float("inf"))
            if acked - at > worst:
                worst, who = acked - at, "/".join(unit)
        return worst, who

    for fault, start in starts.items():
        from_start, who = slowest(start)
        from_end, who_end = slowest(ends.get(fault, start))
        report.recovery[fault] = {
            "from_start": _seconds(from_start),
            "from_end": _seconds(from_end),
            "slowest": who,
            "slowest_from_end": who_end,
        }


def check_run(
    events: list[dict[str, Any]],
    final: dict[str, int],
    epoch_violations: list[str],
    shard_logs: Iterable[str],
) -> Report:
    report = Report()
    pairs = _operations(events)
    report.ops = len(pairs)
    report.ok = sum(1 for _, d in pairs if d["type"] == "ok")
    report.info = report.ops - report.ok
    check_offsets(pairs, final, report)
    check_ownership(events, report)
    check_two_writers(shard_logs, report)
    report.epochs = list(epoch_violations)
    clients = {i["process"] for i, _ in pairs if i["op"] in ("commit", "fetch")} - {"pinned"}
    check_recovery(events, pairs, report, clients)
    return report
