"""Raw Kafka request sequences (``sequences``' conventions): classic groups and their
rounds, groups of both types described, listed and deleted, FindCoordinator and topics, the
offsets of a deleted topic, static members, a stale assignment report, KIP-1263's assignment
interval and what Kafka 4.4 added (ApiVersions v5, DeleteGroups v3, OffsetCommit/OffsetFetch
v10)."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from services.gateway import codec
from tests.interop.sequences import (
    Ids,
    Member,
    Obs,
    commit_error,
    commit_req,
    converge,
    coordinator_knows,
    create_topic,
    describe_epochs,
    err,
    fetch_error,
    first_member,
    hb_obs,
    join_req,
    set_group_config,
    text,
)
from tests.interop.support import Target, unique
from tests.support.kafka_wire import KafkaWire, request


def join_obs(r: Any, ids: Ids) -> dict[str, Any]:
    return {
        "error": err(r.error_code),
        "generation": r.generation_id,
        "protocol": getattr(r, "protocol_name", None),
        "protocol_type": getattr(r, "protocol_type", None),
        "leader": ids("M", r.leader),
        "member": ids("M", r.member_id),
        "members": sorted(ids("M", m.member_id) or "" for m in r.members),
    }


async def classic_group(target: Target) -> Obs:
    ids = Ids()
    w1, w2 = await target.wire("c1"), await target.wire("c2")
    obs: Obs = []
    try:
        topic = unique("cl")
        await create_topic(w1, topic, 4)
        group = unique("cl")
        # v5: an unknown member must first get an id (KIP-394)
        r = await w1.send(join_req(5, group, ""))
        obs.append(("join v5 without id", join_obs(r, ids)))
        m1 = r.member_id
        r = await w1.send(join_req(5, group, m1))
        obs.append(("join v5 with id", join_obs(r, ids)))
        gen = r.generation_id
        r = await w1.send(
            request(
                "sync_group",
                5,
                group_id=group,
                generation_id=gen,
                member_id=m1,
                protocol_type="consumer",
                protocol_name="range",
                assignments=[{"member_id": m1, "assignment": b"a1"}],
            )
        )
        obs.append(
            ("sync leader", (err(r.error_code), r.protocol_type, r.protocol_name, r.assignment))
        )
        r = await w1.send(request("heartbeat", 4, group_id=group, generation_id=gen, member_id=m1))
        obs.append(("heartbeat", err(r.error_code)))

        # a second member: the first learns about the rebalance from its heartbeat
        r2 = await w2.send(join_req(5, group, ""))
        m2 = r2.member_id
        obs.append(("m2 join v5 without id", join_obs(r2, ids)))
        pending = asyncio.ensure_future(w2.send(join_req(5, group, m2)))
        await asyncio.sleep(0.3)
        r = await w1.send(request("heartbeat", 4, group_id=group, generation_id=gen, member_id=m1))
        obs.append(("heartbeat during rebalance", err(r.error_code)))
        r1 = await w1.send(join_req(5, group, m1))
        r2 = await pending
        obs.append(("rejoin leader", join_obs(r1, ids)))
        obs.append(("join follower", join_obs(r2, ids)))
        gen2 = r1.generation_id
        follower_sync = asyncio.ensure_future(
            w2.send(
                request(
                    "sync_group",
                    3,
                    group_id=group,
                    generation_id=gen2,
                    member_id=m2,
                    assignments=[],
                )
            )
        )
        await asyncio.sleep(0.2)
        r = await w1.send(
            request(
                "sync_group",
                5,
                group_id=group,
                generation_id=gen2,
                member_id=m1,
                protocol_type="consumer",
                protocol_name="range",
                assignments=[
                    {"member_id": m1, "assignment": b"a1"},
                    {"member_id": m2, "assignment": b"a2"},
                ],
            )
        )
        rf = await follower_sync
        obs.append(
            (
                "sync round 2",
                [(err(r.error_code), r.assignment), (err(rf.error_code), rf.assignment)],
            )
        )

        # stale callers
        hb = {
            "stale generation": (gen, m1),
            "unknown member": (gen2, "nobody"),
            "current": (gen2, m2),
        }
        for name, (g_, mid) in hb.items():
            r = await w1.send(
                request("heartbeat", 4, group_id=group, generation_id=g_, member_id=mid)
            )
            obs.append((f"heartbeat {name}", err(r.error_code)))
        commits = {
            "v8 current": (8, gen2, m1),
            "v8 stale generation": (8, gen, m1),
            "v8 unknown member": (8, gen2, "nobody"),
            "v8 admin (-1, '')": (8, -1, ""),
            "v9 current": (9, gen2, m1),
        }
        for name, (v, g_, mid) in commits.items():
            obs.append((f"commit {name}", await commit_error(w1, v, group, topic, g_, mid)))
        obs.append(("fetch v9 classic member", await fetch_error(w1, group, topic, m1, gen2)))
        obs.append(("fetch v9 admin", await fetch_error(w1, group, topic, None, -1)))

        r = await w1.send(
            request(
                "sync_group",
                5,
                group_id=group,
                generation_id=gen2,
                member_id=m1,
                protocol_type=None,
                protocol_name=None,
                assignments=[],
            )
        )
        obs.append(("sync v5 without protocol", err(r.error_code)))

        d = await w1.send(
            request("describe_groups", 5, groups=[group], include_authorized_operations=True)
        )
        g = d.groups[0]
        obs.append(
            (
                "describe stable",
                {
                    "error": err(g.error_code),
                    "state": g.group_state,
                    "protocol_type": g.protocol_type,
                    "protocol_data": g.protocol_data,
                    "authorized_operations": g.authorized_operations,
                    "members": sorted(
                        (
                            ids("M", m.member_id),
                            m.client_id,
                            m.client_host,
                            m.member_metadata,
                            m.member_assignment,
                        )
                        for m in g.members
                    ),
                },
            )
        )
        r = await w1.send(request("delete_groups", 2, groups_names=[group]))
        obs.append(("delete non-empty", err(r.results[0].error_code)))
        listed = await w1.send(request("list_groups", 5, states_filter=[], types_filter=[]))
        obs.append(
            (
                "listed",
                [
                    (g_.group_state, g_.group_type, g_.protocol_type)
                    for g_ in listed.groups
                    if g_.group_id == group
                ],
            )
        )

        r = await w1.send(
            request(
                "leave_group",
                5,
                group_id=group,
                members=[
                    {"member_id": m2, "group_instance_id": None, "reason": "bye"},
                    {"member_id": "nobody", "group_instance_id": None},
                ],
            )
        )
        obs.append(
            (
                "leave v5 batched",
                (
                    err(r.error_code),
                    [(ids("M", m.member_id), err(m.error_code)) for m in r.members],
                ),
            )
        )
        r = await w1.send(request("leave_group", 0, group_id=group, member_id="nobody"))
        obs.append(("leave v0 unknown", err(r.error_code)))
        d = await w1.send(request("describe_groups", 6, groups=[group, "no-such-group"]))
        obs.append(
            (
                "describe after leave",
                {  # Kafka answers in no particular order
                    "known" if x.group_id == group else "unknown": (
                        err(x.error_code),
                        x.group_state,
                        len(x.members),
                        # the text a client shows (Admin's describeConsumerGroups)
                        (x.error_message or "").replace(x.group_id, "<group>") or None,
                    )
                    for x in d.groups
                },
            )
        )
        r = await w1.send(request("leave_group", 1, group_id=group, member_id=m1))
        obs.append(("leave v1 leader", err(r.error_code)))
        d = await w1.send(request("describe_groups", 0, groups=[group]))
        obs.append(
            (
                "describe empty",
                (err(d.groups[0].error_code), d.groups[0].group_state, d.groups[0].protocol_data),
            )
        )
        return obs
    finally:
        await w1.close()
        await w2.close()


# ---- cross-type describe, list, delete -----------------------------------------------------


async def admin_cross_type(target: Target) -> Obs:
    wire = await target.wire()
    obs: Obs = []
    try:
        topic = unique("x")
        tid = await create_topic(wire, topic, 2)
        consumer_g, classic_g = unique("xc"), unique("xk")
        m = Member(wire, consumer_g, topic, tid)
        await m.join()
        await converge([m], 2)
        r = await wire.send(join_req(4, classic_g, ""))
        assert r.error_code == ErrorCode.member_id_required, r
        r = await wire.send(join_req(4, classic_g, r.member_id))
        assert r.error_code == ErrorCode.none, r
        d = await wire.send(request("describe_groups", 6, groups=[consumer_g, classic_g]))
        obs.append(
            (
                "DescribeGroups v6 of consumer and classic groups",
                {
                    "consumer" if g.group_id == consumer_g else "classic": (
                        err(g.error_code),
                        g.group_state,
                        g.protocol_type,
                        (g.error_message or "").replace(g.group_id, "<group>") or None,
                    )
                    for g in d.groups
                },
            )
        )
        d = await wire.send(request("describe_groups", 5, groups=[consumer_g]))
        obs.append(
            (
                "DescribeGroups v5 of a consumer group",
                [(err(g.error_code), g.group_state) for g in d.groups],
            )
        )
        c = await wire.send(
            request("consumer_group_describe", 1, group_ids=[classic_g, "no-such-group"])
        )
        obs.append(
            (
                "ConsumerGroupDescribe of a classic and an unknown group",
                sorted(  # Kafka answers in no particular order
                    (
                        g.group_id == classic_g,
                        err(g.error_code),
                        g.group_state,
                        # the text a client shows (Admin's describeConsumerGroups)
                        (g.error_message or "").replace(g.group_id, "<group>") or None,
                    )
                    for g in c.groups
                ),
            )
        )
        # ListGroups reads what is durably written: Kafka may not list a group created a
        # moment ago (its record is not committed yet). Timing, not compared: wait for both.
        for _ in range(100):
            listed = await wire.send(request("list_groups", 5, states_filter=[], types_filter=[]))
            mine = {
                g.group_id: (g.group_state, g.group_type, g.protocol_type)
                for g in listed.groups
                if g.group_id in (consumer_g, classic_g)
            }
            if len(mine) == 2:
                break
            await asyncio.sleep(0.05)
        obs.append(("ListGroups v5", [mine.get(consumer_g), mine.get(classic_g)]))
        for v, kw in (
            (4, {"states_filter": ["STABLE"]}),
            (5, {"states_filter": [], "types_filter": ["Consumer"]}),
            (5, {"states_filter": [], "types_filter": ["bogus"]}),
        ):
            r = await wire.send(request("list_groups", v, **kw))
            obs.append(
                (
                    f"ListGroups v{v} {kw}",
                    (
                        err(r.error_code),
                        sorted(
                            g.group_id == consumer_g and "consumer" or "classic"
                            for g in r.groups
                            if g.group_id in (consumer_g, classic_g)
                        ),
                    ),
                )
            )
        r = await wire.send(request("list_groups", 2))
        obs.append(
            (
                "ListGroups v2",
                sorted(
                    (g.protocol_type,) for g in r.groups if g.group_id in (consumer_g, classic_g)
                ),
            )
        )
        dg = await wire.send(request("delete_groups", 2, groups_names=[consumer_g, "nope"]))
        obs.append(
            (
                "DeleteGroups",
                sorted(  # Kafka answers in no particular order
                    (x.group_id == consumer_g, err(x.error_code)) for x in dg.results
                ),
            )
        )
        od = await wire.send(
            request(
                "offset_delete",
                0,
                group_id=consumer_g,
                topics=[{"name": topic, "partitions": [{"partition_index": 0}]}],
            )
        )
        obs.append(
            (
                "OffsetDelete on a subscribed topic",
                (err(od.error_code), [err(p.error_code) for t in od.topics for p in t.partitions]),
            )
        )
        await m.heartbeat(epoch=-1)
        return obs
    finally:
        await wire.close()


# ---- discovery and topics ------------------------------------------------------------------


async def discovery_and_topics(target: Target) -> Obs:
    wire = await target.wire()
    obs: Obs = []
    try:
        r = await wire.send(request("find_coordinator", 3, key="some-group", key_type=0))
        obs.append(("FindCoordinator v3", err(r.error_code)))
        r = await wire.send(request("find_coordinator", 4, key_type=0, coordinator_keys=["a", ""]))
        obs.append(
            ("FindCoordinator v4 with an empty key", [err(c.error_code) for c in r.coordinators])
        )
        r = await wire.send(request("find_coordinator", 4, key_type=1, coordinator_keys=["txn"]))
        obs.append(
            ("FindCoordinator transaction coordinator", [err(c.error_code) for c in r.coordinators])
        )
        name = unique("tp")
        topic = {"name": name, "num_partitions": 3, "replication_factor": 1}
        cases = [
            ("create", [topic], False),
            ("create again", [topic], False),
            ("invalid name", [{**topic, "name": "a b"}], False),
            ("zero partitions", [{**topic, "name": unique("z"), "num_partitions": 0}], False),
            (
                "duplicate in request",
                [{**topic, "name": "dup-x"}, {**topic, "name": "dup-x"}],
                False,
            ),
            ("validate only", [{**topic, "name": unique("v")}], True),
            (
                "assignments and count",
                [
                    {
                        **topic,
                        "name": unique("ac"),
                        "assignments": [{"partition_index": 0, "broker_ids": [1]}],
                    }
                ],
                False,
            ),
            (
                "replication factor 3 on one broker",
                [{**topic, "name": unique("rf"), "replication_factor": 3}],
                False,
            ),
        ]
        for step, topics, validate in cases:
            r = await wire.send(
                request("create_topics", 7, topics=topics, timeout=30000, validate_only=validate)
            )
            obs.append(
                (
                    f"CreateTopics {step}",
                    [(err(t.error_code), t.num_partitions, t.replication_factor) for t in r.topics],
                )
            )
            if step == "create":
                obs.append(
                    ("CreateTopics v7 returns the topic's configs", bool(r.topics[0].configs))
                )
        for _ in range(100):
            md = await wire.send(request("metadata", 12, topics=[{"name": name}]))
            if len(md.topics[0].partitions) == 3:
                break
            await asyncio.sleep(0.05)
        md = await wire.send(
            request(
                "metadata",
                12,
                topics=[{"name": name}, {"name": "does-not-exist"}, {"name": "in valid"}],
                include_topic_authorized_operations=True,
            )
        )
        names = Ids()
        obs.append(
            (
                "Metadata v12",
                sorted(  # Kafka 4.4 answers in no particular order (4.1: request order)
                    (
                        names("T", t.name) if t.name == name else t.name,
                        err(t.error_code),
                        len(t.partitions),
                        t.is_internal,
                        t.topic_authorized_operations,
                    )
                    for t in md.topics
                ),
            )
        )
        unknown = "AAAAAAAAAAAAAAAAAAAAAQ"
        md = await wire.send(request("metadata", 12, topics=[{"topic_id": unknown}]))
        obs.append(("Metadata v12 unknown id", [(t.name, err(t.error_code)) for t in md.topics]))
        md = await wire.send(
            request(
                "metadata", 8, topics=[{"name": name}], include_cluster_authorized_operations=True
            )
        )
        obs.append(("Metadata v8 cluster operations", md.cluster_authorized_operations))
        d = await wire.send(
            request(
                "delete_topics",
                6,
                topics=[{"name": name}, {"name": "does-not-exist"}, {"topic_id": unknown}],
                timeout=30000,
            )
        )
        obs.append(
            (
                "DeleteTopics v6",
                sorted(  # Kafka answers in no particular order
                    (err(x.error_code), x.name is None) for x in d.responses
                ),
            )
        )
        return obs
    finally:
        await wire.close()


# ---- offsets of a deleted topic -------------------------------------------------------------


async def _fetched(wire: KafkaWire, group: str, topic: str) -> list[tuple[int, int, str]]:
    g: dict[str, Any] = {
        "group_id": group,
        "topics": [{"name": topic, "partition_indexes": [0, 1]}],
    }
    r = await wire.send(request("offset_fetch", 9, groups=[g], require_stable=True))
    return sorted(
        (p.partition_index, p.committed_offset, err(p.error_code))
        for t in r.groups[0].topics
        for p in t.partitions
    )


async def offsets_of_a_deleted_topic(target: Target) -> Obs:
    """Kafka deletes a deleted topic's committed offsets (OffsetMetadataManager
    .onTopicsDeleted), so a topic re-created under the name starts without them."""
    wire = await target.wire()
    obs: Obs = []
    try:
        topic, group, other = unique("od"), unique("od"), unique("odk")
        await create_topic(wire, topic, 2)
        await create_topic(wire, other, 2)
        for t in (topic, other):
            r = await wire.send(
                request(
                    "offset_commit",
                    9,
                    group_id=group,
                    generation_id_or_member_epoch=-1,
                    member_id="",
                    topics=[
                        {
                            "name": t,
                            "partitions": [
                                {"partition_index": 0, "committed_offset": 5},
                                {"partition_index": 1, "committed_offset": 6},
                            ],
                        }
                    ],
                )
            )
            obs.append(
                (f"commit {t == topic}", [err(p.error_code) for p in r.topics[0].partitions])
            )
        obs.append(("fetch before the deletion", await _fetched(wire, group, topic)))
        d = await wire.send(request("delete_topics", 6, topics=[{"name": topic}], timeout=30000))
        obs.append(("DeleteTopics", [err(x.error_code) for x in d.responses]))
        # the coordinator learns of the deletion from the metadata (Kafka: a metadata delta;
        # groupcoord: its catalog image): wait for it, bounded
        fetched: list[tuple[int, int, str]] = []
        for _ in range(200):
            fetched = await _fetched(wire, group, topic)
            if all(offset == -1 for _, offset, _ in fetched):
                break
            await asyncio.sleep(0.05)
        obs.append(("fetch after the deletion", fetched))
        obs.append(("the other topic's offsets stay", await _fetched(wire, group, other)))
        r = await wire.send(request("offset_fetch", 9, groups=[{"group_id": group}]))
        obs.append(
            (
                "fetch all offsets of the group",
                sorted((t.name == other, len(t.partitions)) for t in r.groups[0].topics),
            )
        )
        for _ in range(200):  # Kafka refuses the name while it deletes the topic
            c = await wire.send(
                request(
                    "create_topics",
                    7,
                    topics=[{"name": topic, "num_partitions": 2, "replication_factor": 1}],
                    timeout=30000,
                )
            )
            if c.topics[0].error_code == ErrorCode.none:
                break
            await asyncio.sleep(0.05)
        obs.append(("re-create", err(c.topics[0].error_code)))
        obs.append(("fetch after the re-creation", await _fetched(wire, group, topic)))
        return obs
    finally:
        await wire.close()


# ---- static members ------------------------------------------------------------------------


async def static_members(target: Target) -> Obs:
    ids = Ids()
    wire = await target.wire()
    obs: Obs = []
    try:
        topic = unique("st")
        tid = await create_topic(wire, topic, 4)
        # classic: a static member needs no member-id round trip; a restarted instance takes
        # the old member's place and the old member id is fenced
        group = unique("stk")
        r = await wire.send(join_req(5, group, "", group_instance_id="i1"))
        obs.append(("classic static join", join_obs(r, ids)))
        old, gen = r.member_id, r.generation_id
        r = await wire.send(
            request(
                "sync_group",
                5,
                group_id=group,
                generation_id=gen,
                member_id=old,
                group_instance_id="i1",
                protocol_type="consumer",
                protocol_name="range",
                assignments=[{"member_id": old, "assignment": b"x"}],
            )
        )
        obs.append(("classic static sync", (err(r.error_code), r.assignment)))
        r = await wire.send(join_req(5, group, "", group_instance_id="i1"))
        obs.append(("classic static rejoin of a restarted instance", join_obs(r, ids)))
        new = r.member_id
        r = await wire.send(
            request(
                "heartbeat",
                4,
                group_id=group,
                generation_id=gen,
                member_id=old,
                group_instance_id="i1",
            )
        )
        obs.append(("classic heartbeat of the replaced member id", err(r.error_code)))
        r = await wire.send(commit_req(8, group, topic, gen, old))
        obs.append(
            (
                "classic commit by the replaced member id (no instance id)",
                err(r.topics[0].partitions[0].error_code),
            )
        )
        d = await wire.send(request("describe_groups", 5, groups=[group]))
        g = d.groups[0]
        obs.append(
            (
                "classic describe",
                (
                    err(g.error_code),
                    g.group_state,
                    [(ids("M", m.member_id), m.group_instance_id) for m in g.members],
                ),
            )
        )
        r = await wire.send(
            request(
                "leave_group",
                5,
                group_id=group,
                members=[
                    {"member_id": new, "group_instance_id": "i1"},
                    {"member_id": old, "group_instance_id": "i2"},
                ],
            )
        )
        obs.append(
            (
                "classic static leave",
                (
                    err(r.error_code),
                    sorted((m.group_instance_id, err(m.error_code)) for m in r.members),
                ),
            )
        )

        # consumer: a temporary leave (-2) keeps the assignment for the instance
        cgroup = unique("stc")
        m = Member(wire, cgroup, topic, tid)
        r = await m.heartbeat(epoch=0, full=True, instance_id="s1")
        obs.append(("consumer static join", hb_obs(r)))
        await converge([m], 4)
        epoch, owned = m.epoch, m.owned
        r = await m.heartbeat(epoch=-2, instance_id="s1")
        obs.append(("consumer static temporary leave", (err(r.error_code), r.member_epoch)))
        again = Member(wire, cgroup, topic, tid)
        r = await again.heartbeat(epoch=0, full=True, instance_id="s1")
        # (the absolute epoch depends on when each server learnt of the topic: not compared)
        obs.append(
            (
                "consumer static rejoin",
                {
                    **hb_obs(r),
                    "epoch": None,
                    "same epoch": r.member_epoch == epoch,
                    "same partitions": again.owned == owned,
                },
            )
        )
        await converge([again], 4)
        r = await m.heartbeat(epoch=epoch, instance_id="s1")
        ids = {"member": m.member_id, "again": again.member_id, "group": cgroup}
        obs.append(
            (
                "consumer heartbeat of the replaced member id",
                (err(r.error_code), text(r.error_message, **ids)),
            )
        )
        third = Member(wire, cgroup, topic, tid)
        r = await third.heartbeat(epoch=0, full=True, instance_id="s1")
        obs.append(
            (
                "consumer second live member with the same instance id",
                (err(r.error_code), text(r.error_message, third=third.member_id, **ids)),
            )
        )
        r = await again.heartbeat(epoch=-1, instance_id="s1")
        obs.append(("consumer static leave", (err(r.error_code), r.member_epoch)))
        return obs
    finally:
        await wire.close()


async def consumer_group_stale_report(target: Target) -> Obs:
    """What librdkafka 2.x (``group.protocol=consumer``) sends when a target assignment
    reaches it before the topic's metadata (it looks up every assigned topic id): at once, a
    full heartbeat at the new epoch reporting what it has acknowledged so far -- nothing, on
    joining -- and, once the metadata is in, it takes up that target (even if the coordinator
    has moved on since) and acknowledges it. A coordinator believes the report: partitions the
    member was to give up are released at once, and another member can be handed them while
    the client still takes them up -- two clients holding one partition for a heartbeat
    round. Apache Kafka and groupcoord answer alike, step by step."""
    wire = await target.wire()
    obs: Obs = []
    try:
        m1, r = await first_member(wire, "stale")
        obs.append(("m1 joins", hb_obs(r) | {"owned": m1.owned}))
        first_target = list(m1.owned)
        m2 = Member(wire, m1.group, m1.topic, m1.topic_id)
        group = m1.group
        r = await m2.join()
        obs.append(("m2 joins", hb_obs(r) | {"owned": m2.owned}))
        for _ in range(200):  # the new target (Kafka: within m2's heartbeat)
            epochs = await describe_epochs(wire, group)
            if epochs["assignment_epoch"] == epochs["group_epoch"]:
                break
            await asyncio.sleep(0.05)
        obs.append(("target of two members", await describe_epochs(wire, group)))

        # m1, its first target not taken up yet, reports owning nothing (a full heartbeat)
        m1.owned = []
        r = await m1.heartbeat(full=True)
        kept = list(m1.owned)
        released = sorted(set(first_target) - set(kept))
        obs.append(
            (
                "m1 reports owning nothing",
                hb_obs(r) | {"kept": len(kept), "released": len(released)},
            )
        )
        # m2 is handed the released partitions, m1 never having acknowledged their revocation
        for _ in range(100):
            await m2.heartbeat()
            if m2.owned == released:
                break
            await asyncio.sleep(0.05)
        obs.append(
            (
                "m2 handed what m1 released",
                {"epoch": m2.epoch, "owned_released": m2.owned == released},
            )
        )
        obs.append(("both at the target", await describe_epochs(wire, group)))

        # m1 takes up its first target after all and acknowledges it: the partitions m2 has
        m1.owned = first_target
        r = await m1.heartbeat()
        obs.append(("m1 acknowledges its first target", hb_obs(r)))
        r = await m2.heartbeat()
        obs.append(("m2 heartbeats", hb_obs(r) | {"owned_released": m2.owned == released}))
        obs.append(("afterwards", await describe_epochs(wire, group)))
        return obs
    finally:
        await wire.close()


# ---- KIP-1263: the assignment interval ------------------------------------------------------

#: the group's consumer.assignment.interval.ms in :func:`assignment_interval` (the servers run
#: with 0); long enough that a second join lands inside it on a loaded machine
ASSIGNMENT_INTERVAL_MS = 2000


async def assignment_interval(target: Target) -> Obs:
    """A group with ``consumer.assignment.interval.ms`` set: its first target at the first
    join; a second join within the interval leaves the group Assigning (the joiner has the
    current assignment epoch and nothing); once the interval has passed the target is
    computed (observed before any member heartbeats again, then after)."""
    wire = await target.wire()
    obs: Obs = []
    try:
        topic, group = unique("ai"), unique("ai")
        tid = await create_topic(wire, topic, 6)
        await coordinator_knows(wire, topic, tid)
        await set_group_config(
            wire, group, "consumer.assignment.interval.ms", str(ASSIGNMENT_INTERVAL_MS)
        )
        m1 = Member(wire, group, topic, tid)
        r = await m1.join()
        obs.append(("m1 joins", hb_obs(r) | {"owned": m1.owned}))
        obs.append(("m1 joined: describe", await describe_epochs(wire, group)))
        m2 = Member(wire, group, topic, tid)
        r = await m2.join()
        obs.append(("m2 joins within the interval", hb_obs(r) | {"owned": m2.owned}))
        obs.append(("m2 joined: describe", await describe_epochs(wire, group)))
        r = await m1.heartbeat()
        obs.append(("m1 heartbeats within the interval", hb_obs(r) | {"owned": m1.owned}))
        obs.append(("still within: describe", await describe_epochs(wire, group)))
        await asyncio.sleep(ASSIGNMENT_INTERVAL_MS / 1000 + 0.5)
        obs.append(("interval passed, no heartbeat: describe", await describe_epochs(wire, group)))
        r = await m1.heartbeat()
        obs.append(("m1 heartbeats after the interval", hb_obs(r) | {"owned": len(m1.owned)}))
        obs.append(("afterwards: describe", await describe_epochs(wire, group)))
        await converge([m1, m2], 6)
        obs.append(
            ("converged", {"epochs": [m1.epoch, m2.epoch], "sizes": [len(m1.owned), len(m2.owned)]})
        )
        return obs
    finally:
        await wire.close()


# ---- what Kafka 4.4 added: ApiVersions v5, DeleteGroups v3, OffsetCommit/OffsetFetch v10 ----

NO_SUCH_ID = "AAAAAAAAAAAAAAAAAAAAAQ"  # a topic id no server has


async def kafka44_versions(target: Target) -> Obs:
    """The request versions a Kafka 4.4 client sends first (docs/gateway-conformance.md,
    "Kafka 4.1 to 4.4", rows 19-21), each with the answers that differ by input."""
    wire = await target.wire()
    obs: Obs = []
    ids = Ids()
    try:
        md = await wire.send(request("metadata", 12, topics=None))
        me = md.brokers[0].node_id  # (one broker / one gateway)
        cases = {
            "neither": (None, -1),
            "this cluster and node": (md.cluster_id, me),
            "cluster only": (md.cluster_id, -1),
            "node only": (None, me),
            "another cluster": ("another-cluster", me),
            "another node": (md.cluster_id, me + 100),
        }
        for name, (cluster_id, node_id) in cases.items():
            r = await wire.send(
                request(
                    "api_versions",
                    5,
                    client_software_name="conformance",
                    client_software_version="1",
                    cluster_id=cluster_id,
                    node_id=node_id,
                )
            )
            obs.append((f"ApiVersions v5 {name}", (err(r.error_code), len(r.api_keys) > 0)))

        def by_id(r: Any) -> list[Any]:
            return sorted(
                (ids("topic", codec.from_uuid(t.topic_id)), p.partition_index, err(p.error_code))
                for t in r.topics
                for p in t.partitions
            )

        def commit(
            group: str, topic_id: str, parts: tuple[int, ...], epoch: int = -1, member_id: str = ""
        ) -> Any:
            return request(
                "offset_commit",
                10,
                group_id=group,
                generation_id_or_member_epoch=epoch,
                member_id=member_id,
                topics=[
                    {
                        "topic_id": topic_id,
                        "partitions": [
                            {"partition_index": p, "committed_offset": 5, "committed_metadata": "m"}
                            for p in parts
                        ],
                    }
                ],
            )

        def fetched(r: Any) -> Any:
            g = r.groups[0]
            return (
                err(g.error_code),
                sorted(
                    (
                        ids("topic", codec.from_uuid(t.topic_id)),
                        p.partition_index,
                        p.committed_offset,
                        p.metadata,
                        err(p.error_code),
                    )
                    for t in g.topics
                    for p in t.partitions
                ),
            )

        def fetch(group: str, topics: Any, **member: Any) -> Any:
            g = {"group_id": group, "topics": topics, **member}
            return request("offset_fetch", 10, groups=[g], require_stable=False)

        topic, group = unique("k44"), unique("k44")
        tid = await create_topic(wire, topic, 2)
        r = await wire.send(commit(group, tid, (0, 1, 7)))
        obs.append(("OffsetCommit v10 by id, a partition beyond the topic", by_id(r)))
        r = await wire.send(commit(group, NO_SUCH_ID, (0,)))
        obs.append(("OffsetCommit v10 unknown topic id", by_id(r)))
        r = await wire.send(commit(group, "", (0,)))
        obs.append(("OffsetCommit v10 zero topic id", by_id(r)))
        r = await wire.send(commit(unique("k44"), NO_SUCH_ID, (0,), 5, "nobody"))
        obs.append(("OffsetCommit v10 unknown topic id, unknown member", by_id(r)))
        r = await wire.send(fetch(group, [{"topic_id": tid, "partition_indexes": [0, 1, 7]}]))
        obs.append(("OffsetFetch v10 by id", fetched(r)))
        r = await wire.send(fetch(group, [{"topic_id": NO_SUCH_ID, "partition_indexes": [0]}]))
        obs.append(("OffsetFetch v10 unknown topic id", fetched(r)))
        obs.append(("OffsetFetch v10 every topic", fetched(await wire.send(fetch(group, None)))))
        r = await wire.send(fetch(unique("k44"), [{"topic_id": tid, "partition_indexes": [0]}]))
        obs.append(("OffsetFetch v10 unknown group", fetched(r)))

        cg = unique("k44")
        m = Member(wire, cg, topic, tid)
        await m.join()
        await converge([m], 2)
        r = await wire.send(commit(cg, tid, (0,), m.epoch + 1, m.member_id))
        obs.append(("OffsetCommit v10 member epoch ahead", by_id(r)))
        r = await wire.send(
            request(
                "offset_commit",
                10,
                group_id=cg,
                generation_id_or_member_epoch=m.epoch,
                member_id=m.member_id,
                topics=[
                    {"topic_id": t, "partitions": [{"partition_index": 0, "committed_offset": 3}]}
                    for t in (NO_SUCH_ID, tid)
                ],
            )
        )
        obs.append(("OffsetCommit v10 member, known and unknown ids", by_id(r)))
        r = await wire.send(
            fetch(
                cg,
                [{"topic_id": t, "partition_indexes": [0]} for t in (tid, NO_SUCH_ID)],
                member_id=m.member_id,
                member_epoch=m.epoch,
            )
        )
        obs.append(("OffsetFetch v10 member, known and unknown ids", fetched(r)))
        r = await wire.send(
            fetch(
                cg,
                [{"topic_id": NO_SUCH_ID, "partition_indexes": [0]}],
                member_id=m.member_id,
                member_epoch=m.epoch - 1,
            )
        )
        obs.append(("OffsetFetch v10 stale member epoch", fetched(r)))

        r = await wire.send(request("delete_groups", 3, groups_names=[cg, unique("k44"), ""]))
        obs.append(
            (
                "DeleteGroups v3 non-empty, unknown, empty id",
                sorted(  # (answered in no particular order)
                    ((x.group_id == cg, x.group_id == ""), err(x.error_code), x.error_message)
                    for x in r.results
                ),
            )
        )
        await m.heartbeat(epoch=-1)
        r = await wire.send(request("delete_groups", 3, groups_names=[group]))
        obs.append(
            (
                "DeleteGroups v3 of a group with offsets only",
                [(err(x.error_code), x.error_message) for x in r.results],
            )
        )
        return obs
    finally:
        await wire.close()
