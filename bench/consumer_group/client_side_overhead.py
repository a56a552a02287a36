"""What client-side assignors cost the coordinator: the steady heartbeat of a Stable group
that uses one against the same group assigned server-side (the baseline, same run), and the
coordinator's side of one client-side computation (PrepareAssignment + InstallAssignment)
against the server-side computation of the same target in-process (``uniform``).

Pure core (``CoordinatorStateMachine``, fake clock), one thread; each figure is the median of
``--repeats`` timed passes over every member.

    .venv/bin/python -m bench.consumer_group.client_side_overhead [--members 200]

Results: bench/results/consumer_group_client_side_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.consumer_group.convergence import TOPIC_ID, Client, World  # noqa: E402
from shards.core.consumer import api  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "consumer_group_client_side_overhead.json"
ASSIGNOR = api.ClientAssignor("stripes", 0, 1, 0, 1, b"bench")


class ClientSide(Client):
    """A member that computes its group's assignment when asked (stripes)."""

    def join_fields(self) -> dict[str, Any]:
        return {**super().join_fields(), "client_assignors": (ASSIGNOR,)}

    def heartbeat(self, world: World) -> api.ConsumerGroupHeartbeatResponse:
        response = super().heartbeat(world)
        if response.should_compute_assignment:
            compute(world, self)
        return response


def compute(world: World, member: Client) -> tuple[float, float]:
    """Prepare + install (stripes) for ``member``; the seconds each took in the core."""
    t0 = time.perf_counter()
    prepared = world.shard.consumer_group_prepare_assignment(
        api.ConsumerGroupPrepareAssignmentRequest("g", member.member_id, member.epoch), 0
    )
    prepare_s = time.perf_counter() - t0
    ids = sorted(m.member_id for m in prepared.members)
    (topic,) = prepared.topics
    n = topic.num_partitions
    installed = tuple(
        api.InstalledMember(
            mid,
            (
                api.TopicPartitions(
                    TOPIC_ID, tuple(range(n * i // len(ids), n * (i + 1) // len(ids)))
                ),
            ),
            1,
            b"x",
        )
        for i, mid in enumerate(ids)
    )
    request = api.ConsumerGroupInstallAssignmentRequest(
        "g", member.member_id, member.epoch, prepared.group_epoch, 0, installed
    )
    t0 = time.perf_counter()
    world.write(lambda s, now: s.consumer_group_install_assignment(request, now))
    return prepare_s, time.perf_counter() - t0


def stable(world: World, clients: list[Client]) -> None:
    for _ in range(20):
        world.run_tasks()
        for c in clients:
            c.heartbeat(world)
        g = world.group()
        if g.state_name() == "Stable" and all(c.epoch == g.group_epoch for c in clients):
            return
    raise RuntimeError("the group did not converge")


def steady_us(world: World, clients: list[Client], repeats: int) -> float:
    """Median over passes of the mean time of one steady heartbeat (µs)."""
    passes = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for c in clients:
            c.heartbeat(world)
        passes.append((time.perf_counter() - t0) / len(clients) * 1e6)
    return statistics.median(passes)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()

    server = World(args.partitions)
    server_clients = [Client(f"member-{i:05d}") for i in range(args.members)]
    client = World(args.partitions)
    client_clients: list[Client] = [ClientSide(f"member-{i:05d}") for i in range(args.members)]
    for world, clients in ((server, server_clients), (client, client_clients)):
        for c in clients:
            c.heartbeat(world)
        stable(world, clients)
    assert world.group().client_assignment is None and world.group().target_metadata

    # interleaved, so that both see the same machine
    server_us, client_us = [], []
    for _ in range(3):
        server_us.append(steady_us(server, server_clients, args.repeats))
        client_us.append(steady_us(client, client_clients, args.repeats))

    # one more computation each: a metadata change (client-side), a server-side request
    prepare, install = [], []
    for _ in range(args.repeats):
        chosen = client_clients[0]
        request = api.ConsumerGroupHeartbeatRequest(
            group_id="g",
            member_id=chosen.member_id,
            member_epoch=chosen.epoch,
            client_assignors=(api.ClientAssignor("stripes", 0, 1, len(prepare) + 1, 1, b"bench"),),
        )
        response = client.write(lambda s, now, r=request: s.consumer_group_heartbeat(r, now))
        assert response.should_compute_assignment
        chosen.epoch = response.member_epoch
        p, i = compute(client, chosen)
        prepare.append(p * 1e3)
        install.append(i * 1e3)
        stable(client, client_clients)
    request_ = server.shard.consumer.server_side.group_request(server.group())
    uniform = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        server.assignor.compute(request_)
        uniform.append((time.perf_counter() - t0) * 1e3)

    result = {
        "benchmark": "consumer_group_client_side_overhead",
        "members": args.members,
        "partitions": args.partitions,
        "repeats": args.repeats,
        "steady_heartbeat_us": {
            "server_side_median": round(statistics.median(server_us), 2),
            "client_side_median": round(statistics.median(client_us), 2),
            "ratio": round(statistics.median(client_us) / statistics.median(server_us), 3),
        },
        "computation_ms": {
            "prepare_median": round(statistics.median(prepare), 3),
            "install_median": round(statistics.median(install), 3),
            "server_side_uniform_median": round(statistics.median(uniform), 3),
        },
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }
    report.write(RESULTS, result, newline=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
