"""Memory of consumer groups in a shard holding 100,000 members.

For several layouts of the same 100,000 members -- 1 group of 100,000, 100 groups of 1,000,
10,000 groups of 10, 100,000 groups of 1 -- a shard's state is rebuilt the way a loading
partition rebuilds it: by replaying the records of Stable groups (member subscription,
target assignment, current assignment, group and assignment epochs, topic metadata), each
member owning 2 partitions of its group's topic. Then ``on_loaded`` schedules every
member's session timer on a real asyncio loop through the runtime's ``PartitionTimer``
(timers cost memory too). Then every member heartbeats twice through the steady path, as a
live member does, and what stays is measured again, without the dead heap entries a
replaced timer leaves until its deadline passes (``heartbeating_settled_bytes``: the
headline figure since 2026-11-28; the figures after the load alone flattered a live member
by whatever a heartbeat keeps -- docs/changelog/performance.md, ninth round).

The records go through the log codec first, as in a load: each group's records are encoded
into a snapshot (``RecordCodec.encode_snapshot``, before measuring) and decoded while
measuring (``decode_snapshot``), one group at a time, and the decoded records are replayed
and dropped. Until 2026-11 the benchmark replayed the records as built, which flattered the
state: a member's three records shared one member-id string and every member one
rebalance-timeout int, where decoding gives each record its own copies, and whatever of them
the state keeps is a member's cost too. ``--records built`` is that former method (for
comparing with figures measured before).

Measured with tracemalloc (Python allocations that stay live, records freed) and RSS. A
least-squares fit of ``bytes = groups * per_group + members * per_member`` over the layouts
gives the cost of a member and of a group.

``--protocol classic`` measures classic groups the same way (a Stable group's one record,
members with their subscription and assignment bytes; their session timers; two classic
Heartbeats each through the steady path): results in bench/results/classic_group_memory.json.

Then (KIP-848 groups) what the gRPC servicer's steady-heartbeat shortcut keeps per member
heartbeating through it (a bounded per-process memory: 16,384 requests by default;
docs/performance.md, "The servicer's steady shortcut and its memory"), for 16,384 members:
per member it holds, and with the state and timers of a member that heartbeats.

    .venv/bin/python -m bench.consumer_group.memory [--members 100000] [--records built]
        [--protocol consumer|classic] [--layouts 1,100,10000,100000]

Results: bench/results/consumer_group_memory.json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import heapq
import json
import os
import sys
import tracemalloc
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from shards.adapters.record_codec import RecordCodec  # noqa: E402
from shards.clock import SystemClock  # noqa: E402
from shards.core.classic.group import ClassicGroup  # noqa: E402
from shards.core.coordinator_config import CoordinatorConfig  # noqa: E402
from shards.core.errors import Errors  # noqa: E402
from shards.core.records import (  # noqa: E402
    AssignedTopicPartitions,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    TopicMetadata,
    TopicPartitions,
)
from shards.core.state_machine import CoordinatorStateMachine  # noqa: E402
from shards.core.topics import TopicImage, TopicsImage, uuid_to_text  # noqa: E402
from shards.runtime.contract import Record  # noqa: E402
from shards.runtime.timers import PartitionTimer  # noqa: E402

PARTITIONS_PER_MEMBER = 2
LAYOUTS = (1, 100, 10_000, 100_000)  # number of groups


def topic_id(g: int) -> str:
    return uuid_to_text(g.to_bytes(16, "big"))


def group_records(g: int, members: int, epoch: int = 5) -> list[Record]:
    gid = f"group-{g:06d}"
    tid = topic_id(g)
    records = [
        Record(ConsumerGroupMetadataKey(gid), ConsumerGroupMetadataValue(epoch)),
        Record(
            ConsumerGroupPartitionMetadataKey(gid),
            ConsumerGroupPartitionMetadataValue(
                (TopicMetadata(tid, f"topic-{g}", members * PARTITIONS_PER_MEMBER),)
            ),
        ),
    ]
    for m in range(members):
        mid = uuid_to_text((g * 1_000_003 + m).to_bytes(16, "big"))
        parts = tuple(range(m * PARTITIONS_PER_MEMBER, (m + 1) * PARTITIONS_PER_MEMBER))
        records.append(
            Record(
                ConsumerGroupMemberMetadataKey(gid, mid),
                ConsumerGroupMemberMetadataValue(
                    instance_id=None,
                    rack_id=None,
                    client_id=f"consumer-{gid}-{m}",
                    client_host=f"10.{m % 250}.{m // 250 % 250}.{m % 7}",
                    subscribed_topic_names=(f"topic-{g}",),
                    subscribed_topic_regex=None,
                    rebalance_timeout_ms=300_000,
                    server_assignor=None,
                ),
            )
        )
        records.append(
            Record(
                ConsumerGroupTargetAssignmentMemberKey(gid, mid),
                ConsumerGroupTargetAssignmentMemberValue((TopicPartitions(tid, parts),)),
            )
        )
        records.append(
            Record(
                ConsumerGroupCurrentMemberAssignmentKey(gid, mid),
                ConsumerGroupCurrentMemberAssignmentValue(
                    epoch, epoch - 1, 0, (AssignedTopicPartitions(tid, tuple(parts)),), ()
                ),
            )
        )
    records.append(
        Record(
            ConsumerGroupTargetAssignmentMetadataKey(gid),
            ConsumerGroupTargetAssignmentMetadataValue(epoch),
        )
    )
    return records


def classic_group_records(g: int, members: int, generation: int = 5) -> list[Record]:
    """A Stable classic group (the "consumer" protocol type, "range"), each member with a
    subscription to its group's topic and an assignment of 2 partitions, in the sizes the
    consumer protocol encodes them (ConsumerProtocolSubscription v1 / Assignment v1)."""
    gid = f"classic-{g:06d}"
    topic = f"topic-{g}".encode()
    # version 1, one topic: the same start in a subscription and an assignment
    one_topic = b"\x00\x01\x00\x00\x00\x01" + len(topic).to_bytes(2, "big") + topic
    subscription = one_topic + b"\xff\xff\xff\xff\x00\x00\x00\x00"  # no user data, no owned
    member_list = []
    for m in range(members):
        mid = f"consumer-{gid}-{m}-{uuid.UUID(int=g * 1_000_003 + m)}"
        assignment = (
            one_topic
            + PARTITIONS_PER_MEMBER.to_bytes(4, "big")
            + b"".join(
                (m * PARTITIONS_PER_MEMBER + i).to_bytes(4, "big")
                for i in range(PARTITIONS_PER_MEMBER)
            )
            + b"\xff\xff\xff\xff"
        )
        member_list.append(
            MemberMetadata(
                member_id=mid,
                group_instance_id=None,
                client_id=f"consumer-{gid}-{m}",
                client_host=f"/10.{m % 250}.{m // 250 % 250}.{m % 7}",
                rebalance_timeout=300_000,
                session_timeout=45_000,
                subscription=subscription,
                assignment=assignment,
            )
        )
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=generation,
        protocol="range",
        leader=member_list[0].member_id,
        current_state_timestamp=0,
        members=tuple(member_list),
    )
    return [Record(GroupMetadataKey(gid), value)]


def _heartbeat_consumer(shard: CoordinatorStateMachine, now: int) -> None:
    # The arguments are the state's own strings and ints (the servicer passes what it
    # parsed and drops it).
    for group in shard.consumer.consumer_groups():
        gid = group.group_id
        for member in group.members.values():
            answer = shard.consumer_group_steady_heartbeat(
                gid,
                member.member_id,
                member.member_epoch,
                member.client_id,
                member.client_host,
                now,
            )
            assert answer is not None


def _classic_groups(shard: CoordinatorStateMachine) -> list[ClassicGroup]:
    return [g for g in shard.group_manager.classic.groups.values() if isinstance(g, ClassicGroup)]


def _heartbeat_classic(shard: CoordinatorStateMachine, now: int) -> None:
    for group in _classic_groups(shard):
        for member_id in list(group.members):
            answer = shard.classic_steady_heartbeat(
                group.group_id, group.generation_id, member_id, None, now
            )
            assert answer is Errors.NONE, answer


def _members(shard: CoordinatorStateMachine, protocol: str) -> int:
    if protocol == "consumer":
        return sum(len(g.members) for g in shard.consumer.consumer_groups())
    return sum(len(g.members) for g in _classic_groups(shard))


class _Partition:
    """What PartitionTimer needs from its partition."""

    def __init__(self) -> None:
        self.clock = SystemClock()

    def fire_timer(self, key: tuple[str, ...], op: Any) -> None:  # never fires here
        pass


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def measure(
    groups: int, members: int, decoded: bool = True, protocol: str = "consumer"
) -> dict[str, Any]:
    per_group = members // groups
    build = group_records if protocol == "consumer" else classic_group_records
    image = TopicsImage.of(
        1, [TopicImage(topic_id(g), f"topic-{g}", per_group * 2) for g in range(groups)]
    )
    codec = RecordCodec()
    # the log's bytes are not the state's: encoded before measuring (and the codec warmed up)
    snapshots = [codec.encode_snapshot(build(g, per_group), 0) for g in range(groups)]
    codec.decode_snapshot(codec.encode_snapshot(build(groups, 1), 0))
    gc.collect()
    rss0 = rss_bytes()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    timer = PartitionTimer(_Partition())  # type: ignore[arg-type]
    shard = CoordinatorStateMachine(
        CoordinatorConfig(), timer, image, new_uuid=lambda: uuid.uuid4().bytes
    )
    for g in range(groups):
        records = codec.decode_snapshot(snapshots[g]) if decoded else build(g, per_group)
        for record in records:
            shard.replay(record)
        del records
    gc.collect()
    state, _ = tracemalloc.get_traced_memory()
    shard.on_loaded(0)
    gc.collect()
    with_timers, _ = tracemalloc.get_traced_memory()
    # Then every member heartbeats, twice: the steady case, its session moved on -- what a
    # live member costs (until 2026-11-28 the benchmark stopped above, before any
    # heartbeat: whatever a heartbeat leaves per member went unmeasured).
    clock = timer._partition.clock
    for _ in range(2):
        (_heartbeat_consumer if protocol == "consumer" else _heartbeat_classic)(
            shard, clock.now_ms()
        )
    gc.collect()
    heartbeating, _ = tracemalloc.get_traced_memory()
    # a replaced timer's dead heap entry leaves the heap once its deadline passes (or the
    # heap is compacted): without them, what stays for as long as the members heartbeat
    timer._heap = [e for e in timer._heap if e[2] is not None]
    heapq.heapify(timer._heap)
    gc.collect()
    settled, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss1 = rss_bytes()
    assert _members(shard, protocol) == members
    timer.cancel_all()
    del shard, snapshots
    gc.collect()
    return {
        "groups": groups,
        "members_per_group": per_group,
        "state_bytes": state - base,
        "state_and_timer_bytes": with_timers - base,
        "heartbeating_bytes": heartbeating - base,
        "heartbeating_settled_bytes": settled - base,
        "rss_growth_bytes": rss1 - rss0,
    }


def measure_steady_memory(entries: int) -> dict[str, Any]:
    """What the gRPC servicer's steady-heartbeat shortcut keeps per member heartbeating through
    it (``services.shard.servicer.steady_heartbeat_answer``: the request's bytes, the answer,
    the decision's partition and count; the ids of the member's session are the state's
    strings, made before measuring), for ``entries`` members of 100-member
    groups with ids as above; the request bytes are made inside the measurement, as gRPC
    hands each request over, and only what the memory keeps stays. The coordinator is
    replaced by its answer and one read token (as the runtime's: one per partition, shared by
    the decisions taken while nothing changed)."""
    from groupcoord.v1 import consumer_group_pb2 as pb

    from services.rpc.invoke import Method
    from services.shard import STEADY_MEMO_ENTRIES
    from services.shard.servicer import steady_heartbeat_answer
    from shards.core.steady import SteadyAnswer, SteadyDecision
    from shards.runtime.partition import ReadToken

    request = pb.ConsumerGroupHeartbeatRequest
    response = pb.ConsumerGroupHeartbeatResponse
    method = Method("ConsumerGroupHeartbeat", request, response, object, object, None)  # type: ignore[arg-type]
    served = _Partition()
    token = ReadToken(served)  # type: ignore[arg-type]  # (one per partition, as the runtime's)

    # the members' group and member id strings, as the state holds them (the state's cost)
    state_ids: dict[tuple[str, str], tuple[str, str]] = {}

    def decide(group: str, member: str, epoch: int, client: str, host: str) -> Any:
        return SteadyDecision(SteadyAnswer(epoch, 5_000, False, *state_ids[group, member]), token)

    # the coordinator's steady path: decisions as above, never given again, no classic ones
    path = SimpleNamespace(
        decide=decide, again=lambda *remembered: False, classic=lambda *request: None
    )
    answer = steady_heartbeat_answer(method, path, capacity=entries)
    # (the group and member ids of the state above: member m of group g)
    ids = [
        (f"group-{g:06d}", uuid_to_text((g * 1_000_003 + m).to_bytes(16, "big")))
        for g, m in (divmod(i, 100) for i in range(entries))
    ]
    state_ids.update(((g, m), (g, m)) for g, m in ids)
    gc.collect()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    for i, (group, member) in enumerate(ids):
        message = request(group_id=group, member_id=member, member_epoch=5)
        message.context.client_id = f"consumer-{group}-{i % 100}"
        raw = message.SerializeToString()
        del message
        assert answer(raw, "10.1.2.3")[0] is not None
        del raw
    gc.collect()
    kept, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "entries": entries,
        "capacity": STEADY_MEMO_ENTRIES,
        "bytes_per_entry": (kept - base) / entries,
    }


def fit(rows: list[dict[str, Any]], members: int, key: str) -> dict[str, float]:
    # bytes = G * a + M * b with M fixed: a from the slope over G, b from the intercept.
    xs = [r["groups"] for r in rows]
    ys = [r[key] for r in rows]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    intercept = my - slope * mx
    return {"per_group_bytes": slope, "per_member_bytes": intercept / members}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=100_000)
    ap.add_argument(
        "--records",
        choices=("decoded", "built"),
        default="decoded",
        help="decoded: through the log codec, as a load (default); built: as built, the "
        "method before 2026-11",
    )
    ap.add_argument(
        "--protocol",
        choices=("consumer", "classic"),
        default="consumer",
        help="the groups' protocol: KIP-848 consumer groups (default) or classic groups "
        "(then without the steady shortcut's part: the servicer keeps none for them)",
    )
    ap.add_argument(
        "--layouts",
        type=lambda v: tuple(int(x) for x in v.split(",")),
        default=LAYOUTS,
        help="numbers of groups to share the members, comma-separated (at least two, for "
        "the fit; default %(default)s)",
    )
    ap.add_argument("--out", help="default bench/results/<protocol>_group_memory.json")
    a = ap.parse_args()
    out = a.out or str(ROOT / f"bench/results/{a.protocol}_group_memory.json")
    a.layouts = tuple(g for g in a.layouts if g <= a.members)
    if len(set(a.layouts)) < 2 or any(g < 1 or a.members % g for g in a.layouts):
        ap.error("--layouts: two or more numbers of groups up to --members, each dividing it")
    rows = []
    for groups in a.layouts:
        row = asyncio.run(measure(groups, a.members, a.records == "decoded", a.protocol))
        rows.append(row)
        print(
            f"{groups:>7} groups x {row['members_per_group']:>6} members: "
            f"state {row['state_bytes'] / 2**20:7.1f} MiB, "
            f"+timers {row['state_and_timer_bytes'] / 2**20:7.1f} MiB, "
            f"heartbeating {row['heartbeating_settled_bytes'] / 2**20:7.1f} MiB, "
            f"RSS +{row['rss_growth_bytes'] / 2**20:7.1f} MiB, "
            f"{row['heartbeating_settled_bytes'] / a.members:6.0f} B/member",
            flush=True,
        )
    results = {
        "benchmark": "consumer_group_memory",
        "when": report.utc_now(),
        "machine": report.machine(),
        "params": {
            "members": a.members,
            "partitions_per_member": PARTITIONS_PER_MEMBER,
            "records": a.records,
            "protocol": a.protocol,
            "layouts": list(a.layouts),
        },
        "layouts": rows,
        "fit_state": fit(rows, a.members, "state_bytes"),
        "fit_state_and_timers": fit(rows, a.members, "state_and_timer_bytes"),
        "fit_heartbeating": fit(rows, a.members, "heartbeating_bytes"),
        "fit_heartbeating_settled": fit(rows, a.members, "heartbeating_settled_bytes"),
    }
    if a.protocol == "consumer":  # (the servicer remembers no classic heartbeat)
        results["steady_shortcut_memory"] = steady_shortcut(a.members, results)
    report.write(out, results)
    print(
        json.dumps({k: v for k, v in results.items() if k.startswith(("fit", "steady"))}, indent=2)
    )
    print(f"wrote {out}")


def steady_shortcut(members: int, results: dict[str, Any]) -> dict[str, Any]:
    """The shortcut's memory: per process, for as many members as it holds (16,384 by
    default)."""
    steady = measure_steady_memory(min(members, 16_384))
    # (a member the shortcut holds heartbeats: its state and timers as heartbeating)
    per_member = results["fit_heartbeating_settled"]["per_member_bytes"]
    steady["per_member_with_state_bytes"] = per_member + steady["bytes_per_entry"]
    steady["process_bytes_when_full"] = steady["capacity"] * steady["bytes_per_entry"]
    print(
        f"the steady shortcut's memory: {steady['bytes_per_entry']:.0f} B per member it holds "
        f"(state, timers and it: {steady['per_member_with_state_bytes']:.0f} B), at most "
        f"{steady['process_bytes_when_full'] / 2**20:.1f} MiB per process",
        flush=True,
    )
    return steady


if __name__ == "__main__":
    main()
