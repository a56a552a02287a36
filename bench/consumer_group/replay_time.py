"""Load time of consumer groups: how long a partition takes to replay the records of 100,000
Stable members (the records of ``bench.consumer_group.memory``: member subscription, target
and current assignment, group and assignment epochs, topic metadata), for several layouts
of the same members (1 group of 100,000 ... 100,000 groups of 1). Median of 5 replays each.

What changes the replay path (sharing, indexes, timers) should not make this slower: run it
on two trees in one session (a ``git archive`` of the older one) and compare.

    .venv/bin/python -m bench.consumer_group.replay_time [--members 100000]

Results: bench/results/consumer_group_replay_time.json
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.consumer_group.memory import _Partition, group_records, topic_id  # noqa: E402
from shards.core.coordinator_config import CoordinatorConfig  # noqa: E402
from shards.core.state_machine import CoordinatorStateMachine  # noqa: E402
from shards.core.topics import TopicImage, TopicsImage  # noqa: E402
from shards.runtime.timers import PartitionTimer  # noqa: E402

LAYOUTS = (1, 1_000, 100_000)  # number of groups
REPEATS = 5


def replay_seconds(groups: int, members: int) -> list[float]:
    per_group = members // groups
    image = TopicsImage.of(
        1, [TopicImage(topic_id(g), f"topic-{g}", per_group * 2) for g in range(groups)]
    )
    records = [group_records(g, per_group) for g in range(groups)]
    times = []
    for _ in range(REPEATS):
        gc.collect()
        started = time.perf_counter()
        shard = CoordinatorStateMachine(
            CoordinatorConfig(),
            PartitionTimer(_Partition()),  # type: ignore[arg-type]
            image,
            new_uuid=lambda: uuid.uuid4().bytes,
        )
        for group in records:
            for record in group:
                shard.replay(record)
        times.append(time.perf_counter() - started)
        del shard
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--members", type=int, default=100_000)
    p.add_argument(
        "--out", default=str(ROOT / "bench" / "results" / "consumer_group_replay_time.json")
    )
    a = p.parse_args()
    rows = []
    for groups in LAYOUTS:
        times = replay_seconds(groups, a.members)
        rows.append({"groups": groups, "seconds_median": statistics.median(times), "runs": times})
        print(f"{groups:>7} groups: {statistics.median(times):.3f} s to replay", flush=True)
    doc = {
        "benchmark": "consumer_group_replay_time",
        "when": report.utc_now(),
        "machine": report.machine(),
        "params": {"members": a.members, "repeats": REPEATS},
        "layouts": rows,
    }
    report.write(a.out, doc)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
