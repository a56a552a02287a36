"""Raw Kafka request sequences, run unchanged against Apache Kafka and against groupcoord.

Each sequence returns a list of ``(step, observation)``: what the server answered, reduced to
what must be equal -- error codes (by name), states, epochs, generations, assignments -- with
generated ids (member ids, topic ids) replaced by placeholders in order of appearance and
everything timing-dependent (e.g. how many heartbeats a member needs until its assignment
arrives) folded into the converged result. ``test_conformance`` compares the two lists (its
``SEQUENCES`` names them all).

This module: the steps the sequences share (members, topics, commits, classic joins, group
configs), ApiVersions, KIP-848 consumer groups and their offsets. The classic groups, static
members, admin and discovery, the assignment interval and Kafka 4.4's versions are in
``sequences_groups``; the streams groups (KIP-1071) in ``sequences_streams``.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from services.gateway import codec
from tests.interop.support import Target, unique
from tests.support.kafka_wire import KafkaWire, request

Obs = list[tuple[str, Any]]
Sequence = Callable[[Target], Awaitable[Obs]]


def err(code: Any) -> str:
    return ErrorCode(int(code)).name if not isinstance(code, ErrorCode) else code.name


class Ids:
    """Generated ids -> stable placeholders (first seen = 1)."""

    def __init__(self) -> None:
        self._map: dict[tuple[str, str], str] = {}

    def __call__(self, kind: str, value: str | None) -> str | None:
        if not value:
            return value
        key = (kind, value)
        if key not in self._map:
            self._map[key] = f"{kind}{sum(1 for k in self._map if k[0] == kind) + 1}"
        return self._map[key]


async def create_topic(wire: KafkaWire, name: str, partitions: int) -> str:
    r = await wire.send(
        request(
            "create_topics",
            7,
            topics=[{"name": name, "num_partitions": partitions, "replication_factor": 1}],
            timeout=30000,
        )
    )
    assert r.topics[0].error_code == ErrorCode.none, r
    for _ in range(200):  # Kafka creates topics asynchronously
        md = await wire.send(request("metadata", 12, topics=[{"name": name}]))
        if md.topics[0].error_code == ErrorCode.none and len(md.topics[0].partitions) == partitions:
            break
        await asyncio.sleep(0.05)
    return codec.from_uuid(r.topics[0].topic_id)


# ---- ApiVersions ---------------------------------------------------------------------------

#: StreamsGroupHeartbeat, StreamsGroupDescribe (KIP-1071; docs/streams-groups.md)
STREAMS_APIS = (88, 89)


async def api_versions(target: Target) -> Obs:
    wire = await target.wire()
    try:
        r = await wire.send(
            request(
                "api_versions", 3, client_software_name="conformance", client_software_version="1"
            )
        )
        ranges = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
        obs: Obs = [
            (
                "ApiVersions v3",
                {
                    "error": err(r.error_code),
                    # what groupcoord serves must be advertised with Kafka's exact ranges; the
                    # data-plane APIs (answered as empty logs, Produce NOT_LEADER_OR_FOLLOWER)
                    # only advertised:
                    # Produce v0-2, which Kafka 4.1 still lists, cannot be decoded here
                    "served": {
                        codec.SERVED[k].name: ranges.get(k)
                        for k in sorted(codec.SERVED)
                        if k not in (0, 1, 2, *STREAMS_APIS)
                    },
                    "data plane advertised": sorted(k for k in (0, 1, 2) if k in ranges),
                    "finalized group.version": [
                        (f.min_version_level, f.max_version_level)
                        for f in r.finalized_features
                        if f.name == "group.version"
                    ],
                },
            )
        ]
        # streams groups: their own step (Kafka 4.1 runs without them: a known difference there)
        obs.append(
            (
                "ApiVersions v3 streams group APIs",
                {codec.SERVED[k].name: ranges.get(k) for k in STREAMS_APIS},
            )
        )
        bad = await wire.send(
            request("api_versions", 3, client_software_name="-bad", client_software_version="1")
        )
        obs.append(
            (
                "ApiVersions v3 invalid software name",
                {"error": err(bad.error_code), "api_keys": len(bad.api_keys)},
            )
        )
        return obs
    finally:
        await wire.close()


# ---- ConsumerGroupHeartbeat ----------------------------------------------------------------


class Member:
    """A KIP-848 member driven by hand: heartbeats, acknowledges its assignment."""

    def __init__(
        self, wire: KafkaWire, group: str, topic: str, topic_id: str, member_id: str | None = None
    ) -> None:
        self.wire = wire
        self.group = group
        self.topic = topic
        self.topic_id = topic_id
        self.member_id = member_id or uuid.uuid4().hex[:22]
        self.epoch = 0
        self.owned: list[int] = []
        self.last: Any = None

    async def heartbeat(self, epoch: int | None = None, full: bool = False, **fields: Any) -> Any:
        data: dict[str, Any] = {
            "group_id": self.group,
            "member_id": self.member_id,
            "member_epoch": self.epoch if epoch is None else epoch,
            "rebalance_timeout": -1,
            "subscribed_topic_names": None,
            "topic_partitions": None,
        }
        if full or (epoch == 0):
            data.update(
                rebalance_timeout=30000,
                subscribed_topic_names=[self.topic],
                server_assignor="uniform",
            )
        data["topic_partitions"] = (
            [{"topic_id": self.topic_id, "partitions": self.owned}] if self.owned else []
        )
        data.update(fields)
        r = await self.wire.send(request("consumer_group_heartbeat", 1, **data))
        self.last = r
        if r.error_code == ErrorCode.none:
            self.epoch = r.member_epoch
            if r.assignment is not None:
                self.owned = sorted(
                    p for tp in r.assignment.topic_partitions for p in tp.partitions
                )
        return r

    async def join(self) -> Any:
        return await self.heartbeat(epoch=0, full=True)


async def coordinator_knows(wire: KafkaWire, topic: str, topic_id: str) -> None:
    """Wait until the group coordinator has learnt of a new topic (Kafka's may lag behind
    the Metadata answer; then a first member gets epoch 1 without partitions and the
    partitions at epoch 2): a throwaway member heartbeats until it owns the partitions."""
    probe = Member(wire, unique("probe"), topic, topic_id)
    await probe.join()
    for _ in range(200):
        if probe.owned:
            await probe.heartbeat(epoch=-1)
            return
        await asyncio.sleep(0.05)
        await probe.heartbeat()
    raise AssertionError(f"the coordinator never assigned {topic}")


async def first_member(wire: KafkaWire, prefix: str) -> tuple[Member, Any]:
    """The first member of a new group, joined (and its join's answer), subscribed to a new
    6-partition topic the coordinator knows of."""
    topic, group = unique(prefix), unique(prefix)
    tid = await create_topic(wire, topic, 6)
    await coordinator_knows(wire, topic, tid)
    m1 = Member(wire, group, topic, tid)
    return m1, await m1.join()


async def converge(members: list[Member], total: int, rounds: int = 100) -> None:
    """Heartbeat everyone until the group is Stable -- every member at the group epoch, the
    assignment complete and disjoint -- however many heartbeats that takes (timing is not
    compared)."""
    group = members[0].group
    for _ in range(rounds):
        for m in members:
            await m.heartbeat()
        owned = [set(m.owned) for m in members]
        union = set().union(*owned)
        if (
            len(union) == total
            and sum(len(o) for o in owned) == total
            and len({m.epoch for m in members}) == 1
            and all(m.last.error_code == ErrorCode.none for m in members)
        ):
            d = await members[0].wire.send(request("consumer_group_describe", 0, group_ids=[group]))
            g = d.groups[0]
            if (
                g.group_state == "Stable"
                and g.group_epoch == g.assignment_epoch == members[0].epoch
            ):
                return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no convergence: {[(m.epoch, m.owned, m.last) for m in members]}")


async def describe_epochs(wire: KafkaWire, group: str) -> dict[str, Any]:
    """What ``kafka-consumer-groups --describe --state --verbose`` shows of the epochs."""
    d = await wire.send(request("consumer_group_describe", 1, group_ids=[group]))
    g = d.groups[0]
    return {
        "state": g.group_state,
        "group_epoch": g.group_epoch,
        "assignment_epoch": g.assignment_epoch,
        "member_epochs": sorted(m.member_epoch for m in g.members),
    }


def text(message: str | None, **names: str) -> str | None:
    """An error message as a client shows it, with generated names (member ids, group ids:
    ``names`` maps a placeholder to the value) and numbers (epochs) replaced."""
    if message is None:
        return None
    for placeholder, value in names.items():
        if value:
            message = message.replace(value, f"<{placeholder}>")
    return re.sub(r"\d+", "<n>", message)


def hb_obs(r: Any) -> dict[str, Any]:
    return {
        "error": err(r.error_code),
        "epoch": r.member_epoch,
        "heartbeat_interval_ms": codec.millis(r.heartbeat_interval),
        "has_assignment": r.assignment is not None,
    }


async def consumer_group(target: Target) -> Obs:
    ids = Ids()
    wire = await target.wire()
    obs: Obs = []
    try:
        m1, r = await first_member(wire, "cg")
        topic, group, tid = m1.topic, m1.group, m1.topic_id
        # Absolute epochs: the target is computed inside the heartbeat that bumps the group
        # epoch, so the first member gets epoch 1 with its partitions.
        obs.append(("m1 joins", hb_obs(r) | {"owned": m1.owned}))
        obs.append(("m1 joined: describe", await describe_epochs(wire, group)))
        await converge([m1], 6)
        obs.append(("m1 converged", {"epoch": m1.epoch, "owned": m1.owned}))

        m2 = Member(wire, group, topic, tid)
        r = await m2.join()
        # the joining member gets the new group epoch at once (partitions still m1's)
        obs.append(("m2 joins", hb_obs(r) | {"owned": m2.owned}))
        obs.append(("m2 joined: describe", await describe_epochs(wire, group)))
        await converge([m1, m2], 6)
        obs.append(
            (
                "m1+m2 converged",
                {
                    "epochs": [m1.epoch, m2.epoch],
                    "sizes": sorted([len(m1.owned), len(m2.owned)]),
                },
            )
        )

        ids("M", m1.member_id), ids("M", m2.member_id)  # M1 joined first
        d = await wire.send(
            request(
                "consumer_group_describe", 1, group_ids=[group], include_authorized_operations=True
            )
        )
        g = d.groups[0]
        obs.append(
            (
                "describe stable",
                {
                    "error": err(g.error_code),
                    "state": g.group_state,
                    "group_epoch": g.group_epoch,
                    "assignment_epoch": g.assignment_epoch,
                    "assignor": g.assignor_name,
                    "authorized_operations": g.authorized_operations,
                    "members": sorted(
                        (
                            ids("M", m.member_id),
                            m.member_epoch,
                            m.member_type,
                            tuple(ids("T", n) for n in m.subscribed_topic_names),
                            tuple(
                                (ids("T", tp.topic_name), tuple(sorted(tp.partitions)))
                                for tp in m.assignment.topic_partitions
                            ),
                            m.client_id,
                            m.client_host,
                        )
                        for m in g.members
                    ),
                },
            )
        )

        # fencing and validation
        checks = {
            "epoch ahead": dict(epoch=m1.epoch + 1),
            "epoch behind": dict(epoch=m1.epoch - 1),
            "unknown member": dict(member_id="nobody-is-called-that", epoch=3),
        }
        for name, kw in checks.items():
            member_id = kw.pop("member_id", m1.member_id)
            probe = Member(wire, group, topic, tid, member_id)
            probe.owned = m1.owned
            r = await probe.heartbeat(**kw)
            message = text(r.error_message, member=member_id, group=group)
            obs.append((f"heartbeat {name}", {"error": err(r.error_code), "message": message}))
        invalid = {
            "v1 join without member id": dict(member_id=""),
            "join without subscription": dict(subscribed_topic_names=None),
            "join without rebalance timeout": dict(rebalance_timeout=-1),
            "unknown assignor": dict(server_assignor="nope"),
            "bad regex": dict(subscribed_topic_regex="[", subscribed_topic_names=None),
            "empty regex with names": dict(subscribed_topic_regex=""),
        }
        for name, kw in invalid.items():
            probe = Member(wire, unique("cgv"), topic, tid)
            if "member_id" in kw:
                probe.member_id = kw.pop("member_id")
            r = await probe.heartbeat(epoch=0, full=True, **kw)
            obs.append((f"join: {name}", {"error": err(r.error_code), "message": r.error_message}))

        # v0: the server generates the member id
        r0 = await wire.send(
            request(
                "consumer_group_heartbeat",
                0,
                group_id=unique("cg0"),
                member_id="",
                member_epoch=0,
                rebalance_timeout=30000,
                subscribed_topic_names=[topic],
                topic_partitions=[],
            )
        )
        obs.append(
            (
                "v0 join",
                {
                    "error": err(r0.error_code),
                    "epoch": r0.member_epoch,
                    "member id generated": bool(r0.member_id),
                },
            )
        )

        # m2 leaves: m1 takes everything back
        r = await m2.heartbeat(epoch=-1)
        obs.append(("m2 leaves", {"error": err(r.error_code), "epoch": r.member_epoch}))
        # before m1's next heartbeat: the leave bumped the group epoch only (Assigning)
        obs.append(("m2 left: describe before m1 heartbeats", await describe_epochs(wire, group)))
        await converge([m1], 6)
        obs.append(("m1 alone", {"epoch": m1.epoch, "owned": m1.owned}))
        obs.append(("m1 alone: describe", await describe_epochs(wire, group)))
        d = await wire.send(
            request(
                "consumer_group_describe",
                0,
                group_ids=[group, "no-such"],
                include_authorized_operations=False,
            )
        )
        obs.append(
            (
                "describe after leave",
                {  # Kafka answers in no particular order
                    "known" if g.group_id == group else "unknown": (
                        err(g.error_code),
                        g.group_state,
                        len(g.members),
                        g.authorized_operations,
                    )
                    for g in d.groups
                },
            )
        )
        r = await m1.heartbeat(epoch=-1)
        obs.append(("m1 leaves", {"error": err(r.error_code), "epoch": r.member_epoch}))
        d = await wire.send(request("consumer_group_describe", 1, group_ids=[group]))
        obs.append(
            (
                "describe empty",
                (err(d.groups[0].error_code), d.groups[0].group_state, len(d.groups[0].members)),
            )
        )
        # an empty group keeps the target assignment epoch of its last computed target
        obs.append(("empty: describe", await describe_epochs(wire, group)))
        m3 = Member(wire, group, topic, tid)
        r = await m3.join()
        obs.append(("m3 joins the empty group", hb_obs(r) | {"owned": m3.owned}))
        obs.append(("m3 joined: describe", await describe_epochs(wire, group)))
        await m3.heartbeat(epoch=-1)
        return obs
    finally:
        await wire.close()


# ---- offsets with member epochs and generations --------------------------------------------


def commit_req(
    version: int, group: str, topic: str, generation: int, member_id: str, offset: int = 1
) -> Any:
    data: dict[str, Any] = {
        "group_id": group,
        "generation_id_or_member_epoch": generation,
        "member_id": member_id,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            }
        ],
    }
    if version <= 4:
        data["retention_time"] = -1
    return request("offset_commit", version, **data)


async def commit_error(
    wire: KafkaWire, version: int, group: str, topic: str, generation: int, member_id: str
) -> str:
    r = await wire.send(commit_req(version, group, topic, generation, member_id))
    return err(r.topics[0].partitions[0].error_code)


async def fetch_error(
    wire: KafkaWire, group: str, topic: str, member_id: str | None, epoch: int, version: int = 9
) -> str:
    g: dict[str, Any] = {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]}
    if version >= 9:
        g.update(member_id=member_id, member_epoch=epoch)
    r = await wire.send(request("offset_fetch", version, groups=[g], require_stable=True))
    return err(r.groups[0].error_code)


async def stable_member(
    wire: KafkaWire, prefix: str, partitions: int
) -> tuple[str, str, str, Member]:
    """(topic, group, topic id, member): a new topic of ``partitions`` and a new group whose one
    member owns them all, Stable."""
    topic, group = unique(prefix), unique(prefix)
    tid = await create_topic(wire, topic, partitions)
    m = Member(wire, group, topic, tid)
    await m.join()
    await converge([m], partitions)
    return topic, group, tid, m


async def commit_codes(
    wire: KafkaWire, group: str, topic: str, epoch: int, member_id: str, partitions: list[int]
) -> list[str]:
    """OffsetCommit v9 of ``partitions`` (offset 7 each): each partition's answer."""
    r = await wire.send(
        request(
            "offset_commit",
            9,
            group_id=group,
            generation_id_or_member_epoch=epoch,
            member_id=member_id,
            topics=[
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": p, "committed_offset": 7} for p in partitions
                    ],
                }
            ],
        )
    )
    return [err(p.error_code) for t in r.topics for p in t.partitions]


async def forget_group(wire: KafkaWire, group: str) -> None:
    """Delete an emptied group, unobserved: left on the session's broker, it would show in
    the tests that list every streams group there (``kafka-streams-groups --list``); Kafka
    may have expired it already (then GROUP_ID_NOT_FOUND, ignored)."""
    await wire.send(request("delete_groups", 2, groups_names=[group]))


async def committed_partitions(wire: KafkaWire, group: str, topic: str) -> list[int]:
    """Which of ``topic``'s partitions 0-3 have an offset committed by ``group``."""
    r = await wire.send(
        request(
            "offset_fetch",
            9,
            groups=[
                {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0, 1, 2, 3]}]}
            ],
            require_stable=True,
        )
    )
    return sorted(
        p.partition_index
        for t in r.groups[0].topics
        for p in t.partitions
        if p.committed_offset >= 0
    )


async def moved_on(wire: KafkaWire, prefix: str, obs: Obs) -> tuple[str, str, Member, Member, int]:
    """(topic, group, m1, m2, m1's first epoch): m1 owned the 4 partitions of a new topic at
    its first epoch; m2 joined; m1 gave 2 up and moved to a new epoch, keeping 2 held since
    its first (observed)."""
    topic, group, tid, m1 = await stable_member(wire, prefix, 4)
    first = m1.epoch
    m2 = Member(wire, group, topic, tid)
    await m2.join()
    await converge([m1, m2], 4)
    obs.append(("m1 moved on, keeping two", (m1.epoch > first, len(m1.owned), len(m2.owned))))
    return topic, group, m1, m2, first


def older_epoch_cases(
    m1: Member, m2: Member, first: int
) -> dict[str, tuple[Member, int, list[int]]]:
    """KIP-1251's cases after :func:`moved_on`: name -> (member, epoch, partitions)."""
    kept, given = list(m1.owned), list(m2.owned)
    return {
        "m1 at its first epoch, its partitions": (m1, first, kept),
        "m1 at its first epoch, m2's partition": (m1, first, given[:1]),
        "m1 at its first epoch, one of each": (m1, first, [kept[0], given[0]]),
        "m1 at an epoch before its first": (m1, first - 1, kept),
        "m1 at an epoch ahead": (m1, m1.epoch + 1, kept),
        "m1 at its current epoch, m2's partition": (m1, m1.epoch, given[:1]),
        "m2 at an epoch before its partitions": (m2, m2.epoch - 1, given),
    }


async def assignment_epochs(target: Target) -> Obs:
    """KIP-1251 (Kafka 4.4): a member's partitions keep the epoch they were given at, and
    OffsetCommit accepts an older member epoch for partitions held since then. m1 owns the 4
    partitions; m2 joins; m1 gives 2 up and moves to a new epoch, keeping 2 held since its
    first -- then commits at that first epoch, as a client whose epoch moved on under it."""
    wire = await target.wire()
    obs: Obs = []
    try:
        topic, group, m1, m2, first = await moved_on(wire, "ae", obs)
        cases = older_epoch_cases(m1, m2, first)
        for name, (m, epoch, parts) in cases.items():
            obs.append(
                (
                    f"commit {name}",
                    await commit_codes(wire, group, topic, epoch, m.member_id, parts),
                )
            )
        obs.append(
            (
                "fetch m1 at its first epoch",
                await fetch_error(wire, group, topic, m1.member_id, first),
            )
        )
        written = await committed_partitions(wire, group, topic)
        kept, given = cases["m1 at its first epoch, its partitions"][2], m2.owned
        obs.append(("written", "kept" if written == sorted(kept + given[:1]) else written))
        for m in (m1, m2):
            await m.heartbeat(epoch=-1)
        return obs
    finally:
        await wire.close()


async def targeted(wire: KafkaWire, group: str, members: list[Member]) -> None:
    """Heartbeat ``members`` until the group's target assignment is at its group epoch (Kafka
    4.4 may compute it at a later heartbeat than the one that bumped the epoch)."""
    for _ in range(100):
        d = await wire.send(request("consumer_group_describe", 0, group_ids=[group]))
        g = d.groups[0]
        if g.assignment_epoch == g.group_epoch:
            return
        for m in members:
            await m.heartbeat()
        await asyncio.sleep(0.05)
    raise AssertionError(f"no target at the group epoch: {g}")


async def commit_after_second_revocation(target: Target) -> Obs:
    """What KIP-1251's commit rule trusts (docs/model.md, found by the model): a member that
    gives partitions up and at once has more to give up stays at its epoch, and a commit at
    that epoch is accepted for any partition -- the ones it just released included. m1 owns
    the 4 partitions; m2 joins (m1: 2 to revoke); m3 and m4 join (one partition each, so m1
    must give up one more); m1 reports the first 2 released -- a second revocation at the
    same epoch; m1 commits a released partition at that epoch, then again once it has moved
    on. Partitions observed by role, not by number (the assignor's choice)."""
    wire = await target.wire()
    obs: Obs = []
    try:
        topic, group, tid, m1 = await stable_member(wire, "sr", 4)
        first, everything = m1.epoch, list(m1.owned)
        m2 = Member(wire, group, topic, tid)
        await m2.join()
        await targeted(wire, group, [m2])
        await m1.heartbeat()
        kept = list(m1.owned)  # the answer holds what m1 keeps; the rest is to be revoked
        released = sorted(set(everything) - set(kept))
        obs.append(("m1 to revoke", (m1.epoch == first, len(kept), len(released))))
        m1.owned = everything  # (still owned until m1 reports them gone)
        others = [Member(wire, group, topic, tid) for _ in range(2)]
        for m in others:
            await m.join()
        await targeted(wire, group, [m2, *others])  # one partition each, m1 not told yet
        m1.owned = kept
        r = await m1.heartbeat()
        obs.append(
            (
                "m1 reports 2 released, must give up one more",
                (err(r.error_code), m1.epoch == first, len(m1.owned) <= 1),
            )
        )
        obs.append(
            (
                "commit a released partition at the unchanged epoch",
                await commit_codes(wire, group, topic, first, m1.member_id, released[:1]),
            )
        )
        r = await m1.heartbeat()  # (reports only what the answer left it: the rest gone)
        obs.append(("m1 moved on", (err(r.error_code), m1.epoch > first)))
        obs.append(
            (
                "commit a released partition at the first epoch after that",
                await commit_codes(wire, group, topic, first, m1.member_id, released[1:]),
            )
        )
        for m in (m1, m2, *others):
            await m.heartbeat(epoch=-1)
        await forget_group(wire, group)
        return obs
    finally:
        await wire.close()


async def consumer_group_offsets(target: Target) -> Obs:
    wire = await target.wire()
    obs: Obs = []
    try:
        topic, group, tid, m = await stable_member(wire, "co", 2)
        e = m.epoch
        cases = {
            "v9 current epoch": (9, e, m.member_id),
            "v9 epoch behind": (9, e - 1, m.member_id),
            "v9 epoch ahead": (9, e + 1, m.member_id),
            "v9 unknown member": (9, e, "nobody"),
            "v9 admin (-1, '')": (9, -1, ""),
            "v8 current epoch": (8, e, m.member_id),
            "v2 current epoch": (2, e, m.member_id),
        }
        for name, (v, gen, mid) in cases.items():
            obs.append((f"commit {name}", await commit_error(wire, v, group, topic, gen, mid)))
        fetches = {
            "current epoch": (m.member_id, e),
            "epoch behind": (m.member_id, e - 1),
            "epoch ahead": (m.member_id, e + 1),
            "unknown member": ("nobody", e),
            "admin": (None, -1),
        }
        for name, (mid, epoch) in fetches.items():
            obs.append((f"fetch v9 {name}", await fetch_error(wire, group, topic, mid, epoch)))
        obs.append(("fetch v8", await fetch_error(wire, group, topic, None, -1, version=8)))
        r = await wire.send(
            request(
                "offset_commit",
                9,
                group_id=group,
                generation_id_or_member_epoch=e,
                member_id=m.member_id,
                topics=[
                    {"name": topic, "partitions": [{"partition_index": 7, "committed_offset": 1}]},
                    {
                        "name": "no-such-topic",
                        "partitions": [{"partition_index": 0, "committed_offset": 1}],
                    },
                ],
            )
        )
        obs.append(
            (
                "commit unknown partition and topic",
                sorted(
                    (t.name == topic, p.partition_index, err(p.error_code))
                    for t in r.topics
                    for p in t.partitions
                ),
            )
        )
        r = await wire.send(
            request(
                "offset_delete",
                0,
                group_id=group,
                topics=[{"name": "no-such-topic", "partitions": [{"partition_index": 0}]}],
            )
        )
        obs.append(
            (
                "offset delete unknown topic",
                (err(r.error_code), [err(p.error_code) for t in r.topics for p in t.partitions]),
            )
        )
        await m.heartbeat(epoch=-1)
        obs.append(
            ("commit v9 admin after leave", await commit_error(wire, 9, group, topic, -1, ""))
        )
        obs.append(
            (
                "commit v9 old member after leave",
                await commit_error(wire, 9, group, topic, e, m.member_id),
            )
        )
        return obs
    finally:
        await wire.close()


# ---- classic rounds ------------------------------------------------------------------------

RANGE_METADATA = b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"  # topics ["t"], no data


def join_req(version: int, group: str, member_id: str, **kw: Any) -> Any:
    data: dict[str, Any] = {
        "group_id": group,
        "session_timeout": 10000,
        "rebalance_timeout": 10000,
        "member_id": member_id,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": RANGE_METADATA}],
    }
    data.update(kw)
    return request("join_group", version, **data)


async def lone_classic_member(
    wire: KafkaWire, group: str, assignment: bytes = b"", **join: Any
) -> tuple[str, int]:
    """A classic group of one member made Stable over ``wire`` (JoinGroup v5 twice: KIP-394
    gives the id first; SyncGroup as the leader): its member id and generation."""
    r = await wire.send(join_req(5, group, "", **join))
    member_id = r.member_id
    r = await wire.send(join_req(5, group, member_id, **join))
    assert r.error_code == 0, r
    generation = r.generation_id
    s = await wire.send(
        request(
            "sync_group",
            5,
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            protocol_type="consumer",
            protocol_name="range",
            assignments=[{"member_id": member_id, "assignment": assignment}],
        )
    )
    assert s.error_code == 0, s
    return member_id, generation


async def set_group_config(wire: KafkaWire, group: str, name: str, value: str) -> None:
    """Set a group config and wait until a describe shows it (Kafka applies it through its
    metadata log; bounded: 5 s)."""
    r = await wire.send(
        request(
            "incremental_alter_configs",
            1,
            resources=[
                {
                    "resource_type": 32,
                    "resource_name": group,
                    "configs": [{"name": name, "config_operation": 0, "value": value}],
                }
            ],
            validate_only=False,
        )
    )
    assert [int(x.error_code) for x in r.responses] == [0], r
    for _ in range(50):
        d = await wire.send(
            request(
                "describe_configs",
                4,
                resources=[
                    {"resource_type": 32, "resource_name": group, "configuration_keys": [name]}
                ],
                include_synonyms=False,
                include_documentation=False,
            )
        )
        if [c.value for c in d.results[0].configs] == [value]:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{group}: {name} never became {value}")
