"""Raw Kafka request sequences, run unchanged against Apache Kafka and against groupcoord.

Each sequence returns a list of ``(step, observation)``: what the server answered, reduced to
what must be equal -- error codes (by name), states, epochs, generations, assignments -- with
generated ids (member ids, topic ids) replaced by placeholders in order of appearance and
everything timing-dependent (e.g. how many heartbeats a member needs until its assignment
arrives) folded into the converged result. ``test_conformance`` compares the two lists.
"""

from __future__ import annotations

import asyncio
import json
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


SEQUENCES: dict[str, tuple[Sequence, tuple[str, ...]]] = {
    "api_versions": (api_versions, ()),
    "streams_group": (streams_group, ("StreamsGroupHeartbeat", "StreamsGroupDescribe")),
    "streams_static_members": (
        streams_static_members,
        ("StreamsGroupHeartbeat", "StreamsGroupDescribe"),
    ),
    "streams_endpoints_and_shutdown": (streams_endpoints_and_shutdown, ("StreamsGroupHeartbeat",)),
    "streams_assignment_delays": (
        streams_assignment_delays,
        ("StreamsGroupHeartbeat", "StreamsGroupDescribe", "AlterGroupConfigs"),
    ),
    "streams_assignment_epochs": (streams_assignment_epochs, ("StreamsGroupHeartbeat",)),
    "streams_rejoin": (streams_rejoin, ("StreamsGroupHeartbeat",)),
    "streams_standby_roles": (
        streams_standby_roles,
        ("StreamsGroupHeartbeat", "AlterGroupConfigs"),
    ),
    "consumer_group": (consumer_group, ("ConsumerGroupHeartbeat", "ConsumerGroupDescribe")),
    "consumer_group_stale_report": (
        consumer_group_stale_report,
        ("ConsumerGroupHeartbeat", "ConsumerGroupDescribe"),
    ),
    "consumer_group_offsets": (consumer_group_offsets, ("ConsumerGroupHeartbeat",)),
    "assignment_epochs": (assignment_epochs, ("ConsumerGroupHeartbeat",)),
    "commit_after_second_revocation": (
        commit_after_second_revocation,
        ("ConsumerGroupHeartbeat", "ConsumerGroupDescribe"),
    ),
    "classic_group": (
        classic_group,
        ("JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "DescribeGroups"),
    ),
    "admin_cross_type": (
        admin_cross_type,
        ("ConsumerGroupHeartbeat", "JoinGroup", "DescribeGroups", "ConsumerGroupDescribe"),
    ),
    "discovery_and_topics": (discovery_and_topics, ()),
    "offsets_of_a_deleted_topic": (offsets_of_a_deleted_topic, ()),
    "kafka44_versions": (kafka44_versions, ("ConsumerGroupHeartbeat", "DeleteGroups")),
    "assignment_interval": (
        assignment_interval,
        ("ConsumerGroupHeartbeat", "ConsumerGroupDescribe", "AlterGroupConfigs"),
    ),
    "static_members": (
        static_members,
        (
            "JoinGroup",
            "SyncGroup",
            "Heartbeat",
            "LeaveGroup",
            "ConsumerGroupHeartbeat",
            "DescribeGroups",
        ),
    ),
}
