"""Raw Kafka request sequences (``sequences``' conventions) of streams groups (KIP-1071):
StreamsGroupHeartbeat and StreamsGroupDescribe -- topologies, static members, endpoints and
the shutdown request, assignment delays and epochs, standby roles, a fenced member's
rejoin."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from tests.interop.sequences import (
    Ids,
    Obs,
    commit_codes,
    committed_partitions,
    create_topic,
    err,
    forget_group,
    set_group_config,
)
from tests.interop.support import Target, unique
from tests.support.kafka_wire import KafkaWire, request

# ---- StreamsGroupHeartbeat / StreamsGroupDescribe (KIP-1071) ---------------------------------


def _stateless(topic: str, epoch: int = 0) -> dict[str, Any]:
    return {
        "epoch": epoch,
        "subtopologies": [
            {
                "subtopology_id": "0",
                "source_topics": [topic],
                "state_changelog_topics": [],
                "repartition_source_topics": [],
                "copartition_groups": [],
            }
        ],
    }


def _streams_beats(
    wire: KafkaWire,
    group: str,
    topic: str,
    topology: dict[str, Any] | None = None,
    standby: dict[str, list[dict[str, Any]]] | None = None,
) -> tuple[Callable[..., Awaitable[Any]], dict[str, int], dict[str, list[dict[str, Any]]]]:
    """A StreamsGroupHeartbeat sender for members of ``group`` (a stateless topology on
    ``topic`` unless ``topology`` is given): ``beat(member, epoch=None, **fields)`` sends at
    the member's last epoch (0 to join, with the topology) reporting the active (and standby)
    tasks it was given, and keeps its epoch and tasks (the returned dicts; the standby tasks
    in ``standby`` when given) from successful answers."""
    epochs: dict[str, int] = {}
    owned: dict[str, list[dict[str, Any]]] = {}
    owned_standby = standby if standby is not None else {}

    def task_ids(tasks: Any) -> list[dict[str, Any]]:
        return [
            {"subtopology_id": t.subtopology_id, "partitions": list(t.partitions)} for t in tasks
        ]

    async def beat(member: str, epoch: int | None = None, **extra: Any) -> Any:
        e = epochs.get(member, 0) if epoch is None else epoch
        data: dict[str, Any] = {
            "group_id": group,
            "member_id": member,
            "member_epoch": e,
            "endpoint_information_epoch": 0,
            "active_tasks": owned.get(member, []) if e > 0 else [],
            "standby_tasks": owned_standby.get(member, []) if e > 0 else [],
            "warmup_tasks": [],
            "task_offsets": None,
            "task_end_offsets": None,
        }
        if e == 0:
            data |= {
                "topology": topology or _stateless(topic),
                "rebalance_timeout": 30_000,
                "process_id": uuid.uuid4().hex,
                "client_tags": [],
            }
        data |= extra
        r = await wire.send(request("streams_group_heartbeat", 0, **data))
        if r.error_code == ErrorCode.none and e >= 0:
            epochs[member] = r.member_epoch
            if r.active_tasks is not None:
                owned[member] = task_ids(r.active_tasks)
            if r.standby_tasks is not None:
                owned_standby[member] = task_ids(r.standby_tasks)
        return r

    return beat, epochs, owned


async def _streams_described(
    wire: KafkaWire, group: str, ids: Ids, instance_ids: bool = False
) -> dict[str, Any]:
    """StreamsGroupDescribe of ``group``: its state, epochs and, per member (placeholder id,
    the instance id when asked, epoch), its active tasks held and targeted (counts)."""
    r = await wire.send(
        request(
            "streams_group_describe",
            0,
            group_ids=[group],
            include_authorized_operations=False,
        )
    )
    (g,) = r.groups
    return {
        "state": g.group_state,
        "group epoch": g.group_epoch,
        "assignment epoch": g.assignment_epoch,
        "members": sorted(
            (
                ids("member", m.member_id),
                *((m.instance_id,) if instance_ids else ()),
                m.member_epoch,
                sum(len(t.partitions) for t in m.assignment.active_tasks),
                sum(len(t.partitions) for t in m.target_assignment.active_tasks),
            )
            for m in g.members
        ),
    }


async def streams_group(target: Target) -> Obs:
    """A stateless topology (no internal topics: Kafka would create them, a coordinator-only
    groupcoord only reports them): two members join, converge, one is fenced, one leaves;
    the errors of bad requests; the describe of the group, of an unknown group and of a
    consumer group."""
    wire = await target.wire()
    ids = Ids()
    obs: Obs = []
    try:
        topic, group = unique("st"), unique("sg")
        await create_topic(wire, topic, 4)
        # Kafka's group coordinator learns of a topic from its metadata image a moment after
        # Metadata shows it (a join before that: MISSING_SOURCE_TOPICS)
        await asyncio.sleep(1.0)
        beat, epochs, owned = _streams_beats(wire, group, topic)

        def answer(r: Any) -> dict[str, Any]:
            return {
                "error": err(r.error_code),
                "epoch": r.member_epoch,
                "status": None
                if r.status is None
                else [(int(x.status_code), x.status_detail) for x in r.status],
                "active": None
                if r.active_tasks is None
                else [(t.subtopology_id, list(t.partitions)) for t in r.active_tasks],
            }

        a, b = uuid.uuid4().hex[:22], uuid.uuid4().hex[:22]
        obs.append(("first member joins", answer(await beat(a))))
        obs.append(("steady heartbeat", answer(await beat(a))))
        obs.append(("second member joins", answer(await beat(b))))
        for _ in range(20):
            await asyncio.sleep(0.05)
            await beat(a)
            await beat(b)
            sizes = sorted(sum(len(t["partitions"]) for t in owned.get(m, [])) for m in (a, b))
            if sizes == [2, 2] and epochs[a] == epochs[b]:
                break
        obs.append(
            (
                "converged",
                {
                    "tasks": sorted(
                        sum(len(t["partitions"]) for t in owned.get(m, [])) for m in (a, b)
                    ),
                    "same epoch": epochs[a] == epochs[b],
                },
            )
        )

        async def describe(*groups: str) -> list[dict[str, Any]]:
            r = await wire.send(
                request(
                    "streams_group_describe",
                    0,
                    group_ids=list(groups),
                    include_authorized_operations=False,
                )
            )
            return [
                {
                    "error": err(g.error_code),
                    "message": g.error_message,
                    "state": g.group_state,
                    "group epoch": g.group_epoch,
                    "assignment epoch": g.assignment_epoch,
                    "topology": None
                    if g.topology is None
                    else (
                        g.topology.epoch,
                        [
                            (s.subtopology_id, [ids("topic", t) for t in s.source_topics])
                            for s in g.topology.subtopologies or ()
                        ],
                    ),
                    "members": sorted(
                        (
                            ids("member", m.member_id),
                            m.member_epoch,
                            m.topology_epoch,
                            sum(len(t.partitions) for t in m.assignment.active_tasks),
                            sum(len(t.partitions) for t in m.target_assignment.active_tasks),
                        )
                        for m in g.members
                    ),
                }
                for g in r.groups
            ]

        ids("member", a), ids("member", b)
        obs.append(("describe converged", await describe(group)))
        obs.append(("fenced: an epoch ahead", answer(await beat(a, epoch=epochs[a] + 10))))
        obs.append(("unknown member", answer(await beat(uuid.uuid4().hex[:22], epoch=5))))
        obs.append(("unknown group", answer(await beat(a, epoch=5, group_id=unique("none")))))
        obs.append(("join without topology", answer(await beat(a, epoch=0, topology=None))))
        bad = _stateless(topic)
        bad["subtopologies"][0]["state_changelog_topics"] = [
            {"name": "x-changelog", "partitions": 2, "replication_factor": 0, "topic_configs": []}
        ]
        obs.append(
            (
                "changelog with a partition count",
                answer(await beat(unique("m"), epoch=0, topology=bad)),
            )
        )
        obs.append(("empty member id", answer(await beat("", epoch=0))))
        obs.append(("leave", answer(await beat(b, epoch=-1))))
        for _ in range(20):
            await asyncio.sleep(0.05)
            await beat(a)
            if sum(len(t["partitions"]) for t in owned.get(a, [])) == 4:
                break
        obs.append(("after the leave", (await describe(group))[0]["members"]))
        cg = unique("cg")
        await wire.send(
            request(
                "consumer_group_heartbeat",
                1,
                group_id=cg,
                member_id=uuid.uuid4().hex[:22],
                member_epoch=0,
                rebalance_timeout=30_000,
                subscribed_topic_names=[topic],
                topic_partitions=[],
            )
        )
        described = await describe(unique("none"), cg)
        for d in described:
            d.pop("message")  # the texts differ in the group names only
        obs.append(("describe unknown and consumer groups", described))
        await beat(a, epoch=-1)
        obs.append(("describe emptied", await describe(group)))
        await forget_group(wire, group)
        return obs
    finally:
        await wire.close()


async def streams_static_members(target: Target) -> Obs:
    """Static members of a streams group (Kafka 4.4): a static member (instance id) and a
    dynamic one converge; the static one leaves for a while (epoch -2) and comes back under
    a new member id (same process), taking its place; its old id is fenced, a third member
    cannot take the instance id, an unknown instance id, a -2 without instance id and an
    empty instance id are refused; it leaves for good (-1). Errors with their messages
    (member ids replaced by placeholders), epochs, tasks, and the describe after each step."""
    wire = await target.wire()
    ids = Ids()
    obs: Obs = []
    try:
        topic, group = unique("st"), unique("sg")
        await create_topic(wire, topic, 4)
        await asyncio.sleep(1.0)  # (Kafka's metadata image learns the topic a moment later)
        beat, epochs, owned = _streams_beats(wire, group, topic)
        process = uuid.uuid4().hex

        def text(message: str | None) -> str | None:
            for (kind, value), label in sorted(ids._map.items(), key=lambda kv: -len(kv[0][1])):
                if message and kind == "member":
                    message = message.replace(value, label)
            return message

        def answer(r: Any) -> dict[str, Any]:
            return {
                "error": err(r.error_code),
                "message": text(r.error_message),
                "epoch": r.member_epoch,
                "status": None
                if r.status is None
                else [(int(x.status_code), x.status_detail) for x in r.status],
                "tasks": None
                if r.active_tasks is None
                else sum(len(t.partitions) for t in r.active_tasks),
            }

        async def describe() -> dict[str, Any]:
            return await _streams_described(wire, group, ids, instance_ids=True)

        a, b, a2, c = (uuid.uuid4().hex[:22] for _ in range(4))
        for m in (a, b, a2, c):
            ids("member", m)
        static = {"instance_id": "instance-1"}
        obs.append(("static member joins", answer(await beat(a, process_id=process, **static))))
        obs.append(("dynamic member joins", answer(await beat(b))))
        for _ in range(20):
            await asyncio.sleep(0.05)
            await beat(a, **static)
            await beat(b)
            sizes = sorted(sum(len(t["partitions"]) for t in owned.get(m, [])) for m in (a, b))
            if sizes == [2, 2] and epochs[a] == epochs[b]:
                break
        obs.append(("converged", await describe()))
        obs.append(("static member leaves for a while", answer(await beat(a, -2, **static))))
        obs.append(("away", await describe()))
        obs.append(("the other heartbeats", answer(await beat(b))))
        obs.append(
            (
                "static member comes back under a new member id",
                answer(await beat(a2, 0, process_id=process, **static)),
            )
        )
        obs.append(("back", await describe()))
        obs.append(("the old member id", answer(await beat(a, epochs[a], **static))))
        obs.append(("a third member takes the instance id", answer(await beat(c, 0, **static))))
        obs.append(("an unknown instance id", answer(await beat(c, 3, instance_id="instance-9"))))
        obs.append(("-2 without an instance id", answer(await beat(b, -2))))
        obs.append(("an empty instance id", answer(await beat(c, 0, instance_id=""))))
        obs.append(("static member leaves for good", answer(await beat(a2, -1, **static))))
        obs.append(("gone", await describe()))
        await beat(b, -1)
        await forget_group(wire, group)
        return obs
    finally:
        await wire.close()


async def streams_endpoints_and_shutdown(target: Target) -> Obs:
    """Interactive-query endpoints and the application shutdown request of a streams group
    (Kafka keeps both in memory): two members with endpoints join and converge, reporting
    the endpoint-information epoch they were last told; the epoch each answer carries and
    each endpoint's partitions (as counts, and whether they are the partitions of that
    member's tasks); a member behind the epoch gets the map again; then one member asks for
    an application shutdown: its answer, the other member's, a member joining now, and --
    once every member has left -- a new member's."""
    wire = await target.wire()
    ids = Ids()
    obs: Obs = []
    try:
        topic, group = unique("st"), unique("sg")
        await create_topic(wire, topic, 4)
        await asyncio.sleep(1.0)  # (Kafka's metadata image learns the topic a moment later)
        send, epochs, owned = _streams_beats(wire, group, topic)
        told: dict[str, int] = {}  # member -> the endpoint epoch it was last told
        ports = {}

        async def beat(member: str, epoch: int | None = None, **extra: Any) -> Any:
            extra.setdefault("endpoint_information_epoch", told.get(member, 0))
            r = await send(member, epoch, **extra)
            if r.error_code == ErrorCode.none and r.member_epoch >= 0:
                told[member] = r.endpoint_information_epoch
            return r

        def tasks_of(member: str) -> list[int]:
            return sorted(p for t in owned.get(member, []) for p in t["partitions"])

        def answer(r: Any) -> dict[str, Any]:
            by_port = None
            if r.partitions_by_user_endpoint is not None:
                by_port = {}
                for e in r.partitions_by_user_endpoint:
                    member = ports[int(e.user_endpoint.port)]
                    active = sorted(
                        p for tp in e.active_partitions for p in tp.partitions if tp.topic == topic
                    )
                    by_port[ids("member", member)] = {
                        "host": e.user_endpoint.host,
                        "active": len(active),
                        "active are its tasks": active == tasks_of(member),
                        "other topics": sorted(
                            {tp.topic for tp in e.active_partitions if tp.topic != topic}
                        ),
                        "standby": [list(tp.partitions) for tp in e.standby_partitions],
                    }
            status = [(int(x.status_code), x.status_detail) for x in r.status or ()]
            return {
                "error": err(r.error_code),
                "epoch": r.member_epoch,
                "endpoint epoch": r.endpoint_information_epoch,
                "endpoints": by_port,
                "status": [
                    (code, text and re.sub("member [0-9a-f]+", "member <id>", text))
                    for code, text in status
                ],
            }

        a, b, c, d = (uuid.uuid4().hex[:22] for _ in range(4))
        for k, m in enumerate((a, b, c, d)):
            ids("member", m)
            ports[7001 + k] = m

        def endpoint(member: str) -> dict[str, Any]:
            port = next(p for p, m in ports.items() if m == member)
            return {"user_endpoint": {"host": "localhost", "port": port}}

        obs.append(("first member joins with an endpoint", answer(await beat(a, **endpoint(a)))))
        obs.append(("steady heartbeat at its endpoint epoch", answer(await beat(a))))
        obs.append(("second member joins", answer(await beat(b, **endpoint(b)))))
        steps = []
        for _ in range(20):
            await asyncio.sleep(0.05)
            steps.append(answer(await beat(a)))
            steps.append(answer(await beat(b)))
            if sorted(map(len, map(tasks_of, (a, b)))) == [2, 2] and epochs[a] == epochs[b]:
                break
        obs.append(("converging: endpoint epochs told", [s["endpoint epoch"] for s in steps]))
        obs.append(("a round after", [answer(await beat(a)), answer(await beat(b))]))
        obs.append(
            (
                "a member behind the endpoint epoch",
                answer(await beat(a, endpoint_information_epoch=0)),
            )
        )
        obs.append(("shutdown requested", answer(await beat(b, shutdown_application=True))))
        obs.append(("the other member", answer(await beat(a))))
        obs.append(("a member joining now", answer(await beat(c))))
        twice = [{"subtopology_id": "0", "partition": 0, "offset": 5}] * 2
        r = await beat(a, task_offsets=twice)
        obs.append(("a task reported twice", (err(r.error_code), r.error_message)))
        for m in (a, b, c):
            await beat(m, -1)
        obs.append(("after every member left: a new member", answer(await beat(d))))
        await beat(d, -1)
        await forget_group(wire, group)
        return obs
    finally:
        await wire.close()


async def streams_assignment_delays(target: Target) -> Obs:
    """Kafka 4.4's delays of a streams group's targets, set per group
    (``streams.initial.rebalance.delay.ms`` and ``streams.assignment.interval.ms`` at 1.5 s):
    the first member and a second one joining within the initial delay (answers, statuses,
    epochs, the describe); after the delay (the describe before any heartbeat, then the
    answers); a third member joining within the interval since that target; after the
    interval, the next heartbeat."""
    wire = await target.wire()
    ids = Ids()
    obs: Obs = []
    try:
        topic, group = unique("st"), unique("sg")
        await create_topic(wire, topic, 4)
        await set_group_config(wire, group, "streams.initial.rebalance.delay.ms", "1500")
        await set_group_config(wire, group, "streams.assignment.interval.ms", "1500")
        await asyncio.sleep(1.0)  # (Kafka's metadata image learns the topic a moment later)
        beat, epochs, owned = _streams_beats(wire, group, topic)

        def answer(r: Any) -> dict[str, Any]:
            return {
                "error": err(r.error_code),
                "epoch": r.member_epoch,
                "status": [(int(x.status_code), x.status_detail) for x in r.status or ()],
                "tasks": None
                if r.active_tasks is None
                else sum(len(t.partitions) for t in r.active_tasks),
            }

        async def describe() -> dict[str, Any]:
            return await _streams_described(wire, group, ids)

        a, b, c = (uuid.uuid4().hex[:22] for _ in range(3))
        for m in (a, b, c):
            ids("member", m)
        obs.append(("first member joins", answer(await beat(a))))
        obs.append(("it heartbeats again", answer(await beat(a))))
        obs.append(("second member joins within the delay", answer(await beat(b))))
        obs.append(("during the delay", await describe()))
        await asyncio.sleep(1.8)
        obs.append(("after the delay, before any heartbeat", await describe()))
        obs.append(("first member after the delay", answer(await beat(a))))
        obs.append(("second member after the delay", answer(await beat(b))))
        for _ in range(10):
            if sorted(sum(len(t["partitions"]) for t in owned.get(m, [])) for m in (a, b)) == [
                2,
                2,
            ]:
                break
            await beat(a)
            await beat(b)
        obs.append(("settled", await describe()))
        obs.append(("third member joins within the interval", answer(await beat(c))))
        obs.append(("within the interval", await describe()))
        await asyncio.sleep(1.6)
        obs.append(("after the interval, before any heartbeat", await describe()))
        # (the joiner heartbeats: which member then gives a task up is a tie both break
        # their own way, so the describe after it leaves the member ids out)
        obs.append(("the joiner's heartbeat after the interval", answer(await beat(c))))
        after = await describe()
        after["members"] = sorted(m[1:] for m in after["members"])
        obs.append(("after it", after))
        for m in (a, b, c):
            await beat(m, -1)
        await forget_group(wire, group)
        return obs
    finally:
        await wire.close()


async def streams_assignment_epochs(target: Target) -> Obs:
    """KIP-1251 for streams groups (Kafka 4.4): a member's active tasks keep the epoch they
    were given at, and OffsetCommit accepts an older member epoch for the source partitions of
    tasks held since then. a holds the 4 tasks; b joins; a gives 2 up and moves to a new
    epoch, keeping 2 held since its first -- then commits at that first epoch."""
    wire = await target.wire()
    obs: Obs = []
    try:
        topic, group = unique("sae"), unique("sae")
        other = unique("sae")
        await create_topic(wire, topic, 4)
        await create_topic(wire, other, 1)
        await asyncio.sleep(1.0)  # (Kafka's metadata image learns the topics a moment later)
        beat, epochs, owned = _streams_beats(wire, group, topic)

        def held(member: str) -> list[int]:
            return sorted(p for t in owned.get(member, []) for p in t["partitions"])

        async def settle(members: tuple[str, ...], sizes: list[int]) -> None:
            for _ in range(40):
                for m in members:
                    await beat(m)
                if (
                    sorted(len(held(m)) for m in members) == sizes
                    and len({epochs[m] for m in members}) == 1
                ):
                    return
                await asyncio.sleep(0.05)

        a, b = uuid.uuid4().hex[:22], uuid.uuid4().hex[:22]
        await settle((a,), [4])
        first = epochs[a]
        await settle((a, b), [2, 2])
        kept, given = held(a), held(b)
        obs.append(("a moved on, keeping two", (epochs[a] > first, len(kept), len(given))))
        cases = {
            "a at its first epoch, its tasks": (a, first, topic, kept),
            "a at its first epoch, b's task": (a, first, topic, given[:1]),
            "a at its first epoch, one of each": (a, first, topic, [kept[0], given[0]]),
            "a at an epoch before its first": (a, first - 1, topic, kept),
            "a at an epoch ahead": (a, epochs[a] + 1, topic, kept),
            "a at its current epoch, b's task": (a, epochs[a], topic, given[:1]),
            "a at its first epoch, a topic the topology does not read": (a, first, other, [0]),
            "b at an epoch before its tasks": (b, epochs[b] - 1, topic, given),
        }
        for name, (m, epoch, t, parts) in cases.items():
            obs.append((f"commit {name}", await commit_codes(wire, group, t, epoch, m, parts)))
        written = await committed_partitions(wire, group, topic)
        obs.append(("written", "kept" if written == sorted(kept + given[:1]) else written))
        for m in (a, b):
            await beat(m, -1)
        await forget_group(wire, group)
        return obs
    finally:
        await wire.close()


async def streams_standby_roles(target: Target) -> Obs:
    """A task changing role on a member (Kafka 4.4's CurrentAssignmentBuilder converts it in
    place): ``streams.num.standby.replicas`` = 1, a stateful topology (its changelog made
    beforehand, so neither server has to create it); a runs the 4 tasks alone (no standbys:
    no other process); b joins -- a's answer while it gives 2 active tasks up already holds
    them as standbys, b holds a's kept ones as standbys before its own active tasks come;
    then b leaves and a's standbys become active again. Every answer: error, epoch, active
    and standby task counts, and whether a's standbys are tasks it ran."""
    wire = await target.wire()
    obs: Obs = []
    try:
        topic, group = unique("ssr"), unique("ssr")
        changelog = f"{group}-store-changelog"
        await create_topic(wire, topic, 4)
        await create_topic(wire, changelog, 4)
        await set_group_config(wire, group, "streams.num.standby.replicas", "1")
        await asyncio.sleep(1.0)  # (Kafka's metadata image learns the topics a moment later)
        topology = _stateless(topic)
        topology["subtopologies"][0]["state_changelog_topics"] = [
            {"name": changelog, "partitions": 0, "replication_factor": 0, "topic_configs": []}
        ]
        standby: dict[str, list[dict[str, Any]]] = {}
        beat, epochs, owned = _streams_beats(wire, group, topic, topology, standby)

        def count(tasks: Any) -> int | None:
            return None if tasks is None else sum(len(t.partitions) for t in tasks)

        def tasks_of(held: dict[str, list[dict[str, Any]]], member: str) -> set[int]:
            return {p for t in held.get(member, []) for p in t["partitions"]}

        async def answer(member: str, **extra: Any) -> dict[str, Any]:
            ran = tasks_of(owned, member)
            r = await beat(member, **extra)
            return {
                "error": err(r.error_code),
                "epoch": r.member_epoch,
                "active": count(r.active_tasks),
                "standby": count(r.standby_tasks),
                "standbys it ran": None
                if r.standby_tasks is None
                else sorted(p in ran for t in r.standby_tasks for p in t.partitions),
            }

        a, b = uuid.uuid4().hex[:22], uuid.uuid4().hex[:22]
        obs.append(("a joins", await answer(a)))
        for i in range(3):
            if len(tasks_of(owned, a)) == 4:
                break
            obs.append((f"a heartbeats ({i})", await answer(a)))
        obs.append(("b joins", await answer(b)))
        obs.append(("a gives two up", await answer(a)))
        obs.append(("a reports them gone", await answer(a)))
        obs.append(("b", await answer(b)))
        obs.append(("b again", await answer(b)))
        obs.append(("a", await answer(a)))
        obs.append(("b leaves", await answer(b, epoch=-1)))
        obs.append(("a after the leave", await answer(a)))
        obs.append(("a again", await answer(a)))
        await beat(a, -1)
        await forget_group(wire, group)
        return obs
    finally:
        await wire.close()


def _fmt_key(value: Any) -> str:
    return json.dumps(value, default=str, sort_keys=True)


async def streams_rejoin(target: Target) -> Obs:
    """A fenced streams member rejoins under its member id (epoch 0, owning nothing), as a
    Streams client does after FENCED_MEMBER_EPOCH: settled (2 + 2), then while the group is
    settled and while a rebalance is on (a third member joined)."""
    wire = await target.wire()
    obs: Obs = []
    try:
        topic, group = unique("srj"), unique("srj")
        await create_topic(wire, topic, 4)
        await asyncio.sleep(1.0)  # (Kafka's metadata image learns the topic a moment later)
        beat, epochs, owned = _streams_beats(wire, group, topic)

        def held(member: str) -> int:
            return sum(len(t["partitions"]) for t in owned.get(member, []))

        async def answer(member: str, **extra: Any) -> dict[str, Any]:
            r = await beat(member, **extra)
            return {
                "error": err(r.error_code),
                "epoch": r.member_epoch,
                "active": None
                if r.active_tasks is None
                else sum(len(t.partitions) for t in r.active_tasks),
            }

        a, b, c = (uuid.uuid4().hex[:22] for _ in range(3))
        for _ in range(20):
            for m in (a, b):
                await beat(m)
            if sorted(held(m) for m in (a, b)) == [2, 2] and epochs[a] == epochs[b]:
                break
        obs.append(("settled", (held(a), held(b), epochs[a] == epochs[b])))
        obs.append(("a fenced", await answer(a, epoch=epochs[a] + 5)))
        obs.append(("a rejoins", await answer(a, epoch=0)))
        obs.append(("a heartbeats", await answer(a)))
        obs.append(("b heartbeats", await answer(b)))
        obs.append(("c joins", await answer(c)))
        # which of a and b gives a task up to c is a tie each server breaks its own way (by
        # member id): the two answers are kept in order of their task counts
        first = {m: await answer(m) for m in (a, b)}
        obs.append(("a and b heartbeat", sorted(first.values(), key=_fmt_key)))
        giver = a if held(a) < held(b) else b
        obs.append(
            ("the one giving a task up is fenced", await answer(giver, epoch=epochs[giver] + 5))
        )
        obs.append(("it rejoins", await answer(giver, epoch=0)))
        keeper = b if giver == a else a
        for i in range(4):
            for name, m in (("keeper", keeper), ("rejoined", giver), ("c", c)):
                obs.append((f"round {i}: {name}", await answer(m)))
        for m in (a, b, c):
            await beat(m, -1)
        await forget_group(wire, group)
        return obs
    finally:
        await wire.close()
