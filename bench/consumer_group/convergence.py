"""Convergence: one member joins a Stable group of 1,000 members subscribed to 10,000
partitions; how many heartbeat rounds until every member is STABLE at the group epoch?

Runs the pure core (``CoordinatorStateMachine``, fake clock) with the real ``uniform``
assignor computing the target assignment off the "loop" between rounds, exactly as the
runtime's task executor would. A round is: deliver the pending target assignment (if any),
then every client heartbeats once, in some order. Clients behave like KIP-848 consumers:
they apply an assignment at once (revoked partitions are given up immediately) and report
what they own in their next heartbeat.

Reported per heartbeat order (new member first, last, and random orders):
* ``rounds_to_stable``: rounds after the join until all members are STABLE at the group
  epoch and own exactly their targets;
* ``ack_round``: the round in which the last revoking member acknowledged its revocation;
* ``rounds_after_ack``: ``rounds_to_stable - ack_round`` (target: <= 3);
plus the wall time of the join heartbeat (it builds the assignment request for 1,001
members), of the assignment computation, and of each round's heartbeats.

    .venv/bin/python -m bench.consumer_group.convergence [--members 1000] [--partitions 10000]

Results: bench/results/consumer_group_convergence.json
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from services.shard.assignor_executor import InProcessAssignor  # noqa: E402
from shards.core.consumer import api  # noqa: E402
from shards.core.consumer.group import ConsumerGroup  # noqa: E402
from shards.core.consumer.member import MemberState  # noqa: E402
from shards.core.coordinator_config import CoordinatorConfig  # noqa: E402
from shards.core.state_machine import CoordinatorStateMachine  # noqa: E402
from shards.core.topics import TopicImage, TopicsImage  # noqa: E402
from shards.runtime.contract import AsyncTask  # noqa: E402

START_MS = 1_700_000_000_000
TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"


class NoTimer:
    """Timers are irrelevant here (no clock moves); keep the last op per key."""

    def __init__(self) -> None:
        self.keys: dict[tuple[str, ...], Any] = {}

    def schedule(self, key: tuple[str, ...], delay_ms: int, op: Any) -> None:
        self.keys[key] = op

    def schedule_keyed(self, key: tuple[str, ...], delay_ms: int, op: Any) -> None:
        self.keys[key] = op

    def postpone(self, key: tuple[str, ...], delay_ms: int, op: Any) -> bool:
        return self.keys.get(key) is op

    def cancel(self, key: tuple[str, ...]) -> None:
        self.keys.pop(key, None)

    def is_scheduled(self, key: tuple[str, ...]) -> bool:
        return key in self.keys


class World:
    def __init__(self, partitions: int) -> None:
        image = TopicsImage.of(1, [TopicImage(TOPIC_ID, "events", partitions)])
        self.shard = CoordinatorStateMachine(
            CoordinatorConfig(), NoTimer(), image, new_uuid=lambda: uuid.uuid4().bytes
        )  # type: ignore[arg-type]
        self.assignor = InProcessAssignor(["uniform", "range"])
        self.tasks: dict[str, AsyncTask] = {}
        self.assign_seconds: list[float] = []

    def write(self, op: Any) -> Any:
        result = op(self.shard, START_MS)
        if result.replay_records:  # as the runtime does
            for record in result.records:
                self.shard.replay(record)
        for task in result.tasks:
            self.tasks[task.key] = task
        return result.response

    def run_tasks(self) -> None:
        for key in list(self.tasks):
            task = self.tasks.pop(key)
            t0 = time.perf_counter()
            answer = self.assignor.compute(task.request)
            self.assign_seconds.append(time.perf_counter() - t0)
            self.write(lambda s, now, task=task, answer=answer: task.on_done(answer, now))

    def group(self) -> ConsumerGroup:
        g = self.shard.group_manager.groups["g"]
        assert isinstance(g, ConsumerGroup)
        return g


class Client:
    def __init__(self, member_id: str) -> None:
        self.member_id = member_id
        self.epoch = 0
        self.owned: dict[str, tuple[int, ...]] = {}

    def join_fields(self) -> dict[str, Any]:
        """What the first heartbeat (epoch 0) adds to the request."""
        return {"rebalance_timeout_ms": 300_000, "subscribed_topic_names": ("events",)}

    def heartbeat(self, world: World) -> api.ConsumerGroupHeartbeatResponse:
        fields = self.join_fields() if self.epoch == 0 else {}
        request = api.ConsumerGroupHeartbeatRequest(
            group_id="g",
            member_id=self.member_id,
            member_epoch=self.epoch,
            topic_partitions=tuple(api.TopicPartitions(t, p) for t, p in self.owned.items()),
            **fields,
        )
        response = world.write(lambda s, now: s.consumer_group_heartbeat(request, now))
        assert response.error_code == 0, response
        self.epoch = response.member_epoch
        if response.assignment is not None:
            self.owned = {tp.topic_id: tp.partitions for tp in response.assignment}
        return response  # type: ignore[no-any-return]


def stable_group(members: int, partitions: int) -> tuple[World, list[Client]]:
    world = World(partitions)
    clients = [Client(f"member-{i:05d}") for i in range(members)]
    for c in clients:  # every join supersedes the previous assignment request
        c.heartbeat(world)
    for _ in range(10):
        world.run_tasks()
        for c in clients:
            c.heartbeat(world)
        if converged(world, clients):
            return world, clients
    raise RuntimeError("the initial group did not converge")


def converged(world: World, clients: list[Client]) -> bool:
    g = world.group()
    if world.tasks or g.group_epoch != g.assignment_epoch:
        return False
    for c in clients:
        m = g.members[c.member_id]
        if not m.is_reconciled_to(g.group_epoch) or c.epoch != m.member_epoch:
            return False
        if c.owned != dict(g.target_of(c.member_id)):
            return False
    return True


def one_join(members: int, partitions: int, order: str, seed: int) -> dict[str, Any]:
    world, clients = stable_group(members, partitions)
    newcomer = Client("member-new")
    t0 = time.perf_counter()
    newcomer.heartbeat(world)
    join_s = time.perf_counter() - t0
    world.assign_seconds.clear()
    everyone = clients + [newcomer]
    rng = random.Random(seed)
    ack_round = 0
    round_s: list[float] = []
    revoking_ever: set[str] = set()
    for n in range(1, 20):
        world.run_tasks()
        if order == "new-first":
            sequence = [newcomer] + clients
        elif order == "new-last":
            sequence = clients + [newcomer]
        else:
            sequence = everyone[:]
            rng.shuffle(sequence)
        t0 = time.perf_counter()
        for c in sequence:
            c.heartbeat(world)
        round_s.append(time.perf_counter() - t0)
        g = world.group()
        revoking = {
            m.member_id for m in g.members.values() if m.state is MemberState.UNREVOKED_PARTITIONS
        }
        if revoking_ever - revoking and not revoking:
            ack_round = ack_round or n
        revoking_ever |= revoking
        if converged(world, everyone):
            return {
                "order": order,
                "seed": seed,
                "rounds_to_stable": n,
                "revoking_members": len(revoking_ever),
                "ack_round": ack_round or n,
                "rounds_after_ack": n - (ack_round or n),
                "join_heartbeat_ms": join_s * 1000,
                "assignment_ms": [s * 1000 for s in world.assign_seconds],
                "round_ms": [s * 1000 for s in round_s],
                "newcomer_partitions": sum(len(p) for p in newcomer.owned.values()),
            }
    raise RuntimeError(f"no convergence ({order})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--random-orders", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench/results/consumer_group_convergence.json"))
    a = ap.parse_args()
    runs = [
        one_join(a.members, a.partitions, "new-first", 0),
        one_join(a.members, a.partitions, "new-last", 0),
    ]
    runs += [one_join(a.members, a.partitions, "random", s) for s in range(a.random_orders)]
    for r in runs:
        print(
            f"{r['order']:>9} seed {r['seed']}: stable after {r['rounds_to_stable']} rounds, "
            f"revocations acknowledged in round {r['ack_round']} "
            f"({r['revoking_members']} members revoked), "
            f"{r['rounds_after_ack']} rounds after; "
            f"join heartbeat {r['join_heartbeat_ms']:.1f} ms, "
            f"assignment {r['assignment_ms'][0]:.1f} ms, "
            f"round {statistics.median(r['round_ms']):.1f} ms",
            flush=True,
        )
    results = {
        "benchmark": "consumer_group_convergence",
        "when": report.utc_now(),
        "machine": report.machine(loadavg=True),
        "params": {"members": a.members, "partitions": a.partitions, "assignor": "uniform"},
        "max_rounds_after_ack": max(r["rounds_after_ack"] for r in runs),
        "max_rounds_to_stable": max(r["rounds_to_stable"] for r in runs),
        "runs": runs,
    }
    report.write(a.out, results)
    print(f"max rounds after the revocations were acknowledged: {results['max_rounds_after_ack']}")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
