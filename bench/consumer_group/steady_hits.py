"""How a shard answers steady heartbeats while a member of the same partition commits offsets.

Consumers commit about as often as they heartbeat (auto-commit every 5 s), and a group's
commits go to the coordinator partition its heartbeats go to. The gRPC servicer gives a
remembered steady decision again while the partition's read token it was taken under is valid
(docs/performance.md, "The servicer's steady shortcut and its memory" and "Offset commits
leave steady decisions standing"); this benchmark counts, for each steady heartbeat, which
way it went:

* ``given_again`` -- the remembered decision, given again without deciding;
* ``decided`` -- decided anew by the coordinator's shortcut (``steady_decision``), the answer
  given at once;
* ``declined`` -- the shortcut said "not now" (records that change answers pending or in
  flight, or not the steady case) and the general way answered it: a write on the partition.

A shard app runs in this process (SQLite store, the component tests' settings); ``--groups``
groups of one Stable member each, all on one coordinator partition, heartbeat over gRPC as
fast as they are answered, while the first group's member commits an offset ``--commits``
times per second (each rate its own phase, ``--seconds`` long). ``--session-ms``: the
members' session timeout (each member's session timer comes due once per timeout while it
heartbeats: it is postponed inside the timer, no operation on the partition; before that
change each one was an operation, counted). The coordinator's steady methods are wrapped
(in this process, for good) to count; nothing else is changed.

    .venv/bin/python -m bench.consumer_group.steady_hits [--commits 0 20 100] [--seconds 3]
        [--session-ms 1000]

Results: bench/results/consumer_group_steady_hits.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from groupcoord.v1 import offsets_pb2  # noqa: E402

from bench import report  # noqa: E402
from shards.coordinator import GroupCoordinatorService  # noqa: E402
from tests.component.conftest import start_client  # noqa: E402
from tests.component.test_steady_heartbeat_grpc import _join, _steady  # noqa: E402

WAYS = ("given_again", "decided", "declined")


def count_ways() -> dict[str, int]:
    """Wrap the coordinator's steady methods (before an app binds them) to count. A declined
    heartbeat reaches the coordinator's general handler, which asks ``steady_heartbeat`` (so
    ``steady_decision``) once more: counted apart, as answered at once or written."""
    counts = dict.fromkeys((*WAYS, "not_again", "general_at_once", "general_written"), 0)
    decide, again = GroupCoordinatorService.steady_decision, GroupCoordinatorService.steady_again
    heartbeat = GroupCoordinatorService.steady_heartbeat
    general = False

    def steady_decision(self: GroupCoordinatorService, *args: Any) -> Any:
        decided = decide(self, *args)
        if general:
            counts["general_at_once" if decided is not None else "general_written"] += 1
        else:
            counts["decided" if decided is not None else "declined"] += 1
        return decided

    def steady_heartbeat(self: GroupCoordinatorService, *args: Any) -> Any:
        nonlocal general
        general = True
        try:
            return heartbeat(self, *args)
        finally:
            general = False

    def steady_again(self: GroupCoordinatorService, *remembered: Any) -> bool:
        given = again(self, *remembered)
        counts["given_again" if given else "not_again"] += 1
        return given

    GroupCoordinatorService.steady_decision = steady_decision  # type: ignore[method-assign]
    GroupCoordinatorService.steady_again = steady_again  # type: ignore[method-assign]
    GroupCoordinatorService.steady_heartbeat = steady_heartbeat  # type: ignore[method-assign]
    return counts


async def phase(client: Any, epochs: dict[str, int], commits_per_s: float, seconds: float) -> dict:
    stop = time.monotonic() + seconds

    async def heartbeat(group: str, epoch: int) -> int:
        n = 0
        while time.monotonic() < stop:
            r = await client.coordinator.ConsumerGroupHeartbeat(_steady("m", epoch, group=group))
            assert r.error_code == 0 and r.member_epoch == epoch, r
            n += 1
        return n

    async def commit(group: str, epoch: int) -> int:
        n = 0
        while time.monotonic() < stop:
            r = await client.coordinator.OffsetCommit(
                offsets_pb2.OffsetCommitRequest(
                    group_id=group,
                    member_id="m",
                    generation_id_or_member_epoch=epoch,
                    topics=[
                        offsets_pb2.OffsetCommitRequestTopic(
                            name="t",
                            partitions=[
                                offsets_pb2.OffsetCommitRequestPartition(
                                    partition_index=0, committed_offset=n
                                )
                            ],
                        )
                    ],
                )
            )
            assert r.topics[0].partitions[0].error_code == 0, r
            n += 1
            await asyncio.sleep(1 / commits_per_s)
        return n

    first = next(iter(epochs))
    beats = [heartbeat(g, e) for g, e in epochs.items()]
    extra = [commit(first, epochs[first])] if commits_per_s else []
    done = await asyncio.gather(*beats, *extra)
    return {
        "heartbeats": sum(done[: len(beats)]),
        "commits": done[len(beats)] if extra else 0,
    }


async def run(
    rates: list[float], groups: int, seconds: float, session_ms: int | None = None
) -> list[dict]:
    counts = count_ways()
    results = []
    sessions = (
        {}
        if session_ms is None
        else {
            "consumer_group_session_timeout_ms": session_ms,
            "consumer_group_min_session_timeout_ms": min(session_ms, 45_000),
        }
    )
    with tempfile.TemporaryDirectory() as tmp:
        client = await start_client(Path(tmp), **sessions)
        try:
            service = client.app.served_coordinator
            target = service.partition_for("steady-hits")
            names = (f"steady-hits-{i}" for i in range(1_000_000))
            chosen = [g for g in names if service.partition_for(g) == target][:groups]
            epochs = {g: await _join(client, "m", group=g) for g in chosen}
            for rate in rates:
                for way in counts:
                    counts[way] = 0
                done = await phase(client, epochs, rate, seconds)
                steady = sum(counts[w] for w in WAYS)
                assert steady == done["heartbeats"], (steady, done)  # every one counted once
                results.append(
                    {
                        "commits_per_s_asked": rate,
                        "commits_per_s": done["commits"] / seconds,
                        "heartbeats_per_s": done["heartbeats"] / seconds,
                        **{w: counts[w] for w in counts if w != "not_again"},
                        **{f"{w}_share": counts[w] / steady for w in WAYS},
                    }
                )
                print(
                    f"{rate:g} commits/s asked ({done['commits'] / seconds:.0f}/s done): "
                    f"{done['heartbeats'] / seconds:.0f} heartbeats/s, "
                    + ", ".join(f"{w} {counts[w] / steady:.1%}" for w in WAYS)
                    + f" (declined, then: {counts['general_at_once']} answered at once, "
                    f"{counts['general_written']} through a write)",
                    flush=True,
                )
        finally:
            await client.channel.close()
            await client.app.stop()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=float, nargs="+", default=[0, 20, 100])
    ap.add_argument("--groups", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument(
        "--session-ms",
        type=int,
        default=None,
        help="the members' session timeout (default: the shard's, 45 s); a session's timer "
        "comes due once per timeout while its member heartbeats",
    )
    ap.add_argument("--out", default=str(ROOT / "bench/results/consumer_group_steady_hits.json"))
    a = ap.parse_args()
    results = asyncio.run(run(a.commits, a.groups, a.seconds, a.session_ms))
    out = {
        "benchmark": "consumer_group_steady_hits",
        "when": report.utc_now(),
        "machine": {"python": platform.python_version()},
        "params": {
            "groups": a.groups,
            "seconds": a.seconds,
            "session_ms": a.session_ms,
            "store": "sqlite",
        },
        "results": results,
    }
    Path(a.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
