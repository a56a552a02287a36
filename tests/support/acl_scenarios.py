"""ACL scenarios over the Kafka wire, run against groupcoord (SASL gateway + shards with the
authorizer) and against Apache Kafka (StandardAuthorizer, SASL PLAIN): the same users, ACLs
and requests, each reduced to the error codes (and the names) the server answered.

Users: ``admin`` (super user), ``alice``, ``bob`` (no ACLs), ``carol``. Topics ``orders``
and ``secrets`` (1 partition). Groups: ``app-*`` (alice may read) and ``other-1``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tests.support.kafka_wire import KafkaWire, request

PASSWORDS = {
    "admin": "admin-secret",
    "alice": "alice-secret",
    "bob": "bob-secret",
    "carol": "carol-secret",
}
TOPICS = ("orders", "secrets")


@dataclass(frozen=True)
class Acl:
    """One binding: resource type GROUP/TOPIC/CLUSTER, LITERAL/PREFIXED, operation name."""

    resource_type: str
    name: str
    principal: str
    operation: str
    permission: str = "ALLOW"
    pattern: str = "LITERAL"


ACLS = (
    Acl("GROUP", "app-", "User:alice", "READ", pattern="PREFIXED"),
    Acl("TOPIC", "orders", "User:alice", "READ"),
    Acl("GROUP", "*", "User:carol", "ALL"),
    Acl("GROUP", "app-", "User:carol", "READ", "DENY", "PREFIXED"),
    Acl("TOPIC", "orders", "User:carol", "READ"),
)


async def login(host: str, port: int, user: str) -> KafkaWire:
    """A connection authenticated with SASL/PLAIN as ``user``."""
    w = await KafkaWire.connect(host, port, f"acl-{user}")
    r = await w.send(request("sasl_handshake", 1, mechanism="PLAIN"))
    assert r.error_code == 0, r
    token = b"\0" + user.encode() + b"\0" + PASSWORDS[user].encode()
    r = await w.send(request("sasl_authenticate", 2, auth_bytes=token))
    assert r.error_code == 0, r
    return w


def commit(group: str, topics: dict[str, int]) -> Any:
    return request(
        "offset_commit",
        9,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=[
            {
                "name": t,
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            }
            for t, offset in topics.items()
        ],
    )


def fetch(group: str, topics: list[str] | None) -> Any:
    return request(
        "offset_fetch",
        9,
        groups=[
            {
                "group_id": group,
                "member_id": None,
                "member_epoch": -1,
                "topics": None
                if topics is None
                else [{"name": t, "partition_indexes": [0]} for t in topics],
            }
        ],
        require_stable=False,
    )


def _commit_codes(r: Any) -> dict[str, int]:
    return {t.name: int(p.error_code) for t in r.topics for p in t.partitions}


def _fetch_summary(r: Any) -> Any:
    (g,) = r.groups
    return {
        "group": int(g.error_code),
        "topics": {
            t.name: [(int(p.error_code), p.committed_offset) for p in t.partitions]
            for t in g.topics
        },
    }


def heartbeat(group: str, topics: list[str]) -> Any:
    return request(
        "consumer_group_heartbeat",
        0,
        group_id=group,
        member_id="",
        member_epoch=0,
        instance_id=None,
        rack_id=None,
        rebalance_timeout=30_000,
        subscribed_topic_names=topics,
        server_assignor=None,
        topic_partitions=[],
    )


Step = Callable[[Callable[[str], Awaitable[KafkaWire]]], Awaitable[Any]]


async def _as(connect: Callable[[str], Awaitable[KafkaWire]], user: str, req: Any) -> Any:
    w = await connect(user)
    try:
        return await w.send(req)
    finally:
        await w.close()


async def setup_groups(connect: Callable[[str], Awaitable[KafkaWire]]) -> None:
    """The admin commits to app-1 and other-1 (the groups then exist)."""
    for group in ("app-1", "other-1"):
        r = await _as(connect, "admin", commit(group, {"orders": 5, "secrets": 6}))
        assert set(_commit_codes(r).values()) == {0}, r


async def run_scenarios(connect: Callable[[str], Awaitable[KafkaWire]]) -> dict[str, Any]:
    """Every scenario's outcome, by name (``connect(user)``: an authenticated connection)."""
    out: dict[str, Any] = {}

    async def run(name: str, user: str, req: Any, summary: Callable[[Any], Any]) -> None:
        out[name] = summary(await _as(connect, user, req))

    await run(
        "commit: topic READ per topic",
        "alice",
        commit("app-1", {"orders": 7, "secrets": 7}),
        _commit_codes,
    )
    await run("commit: no group READ", "bob", commit("app-1", {"orders": 7}), _commit_codes)
    await run(
        "commit: deny wins (prefixed)", "carol", commit("app-1", {"orders": 8}), _commit_codes
    )
    await run("commit: allow ALL on *", "carol", commit("zzz-carol", {"orders": 8}), _commit_codes)
    await run(
        "fetch: topic DESCRIBE per topic",
        "alice",
        fetch("app-1", ["orders", "secrets"]),
        _fetch_summary,
    )
    await run("fetch: all topics filtered", "alice", fetch("app-1", None), _fetch_summary)
    await run("fetch: no group DESCRIBE", "bob", fetch("app-1", ["orders"]), _fetch_summary)
    await run(
        "delete groups: no DELETE",
        "alice",
        request("delete_groups", 2, groups_names=["app-1"]),
        lambda r: [(g.group_id, int(g.error_code)) for g in r.results],
    )
    await run(
        "describe groups: authorized operations",
        "alice",
        request(
            "describe_groups", 5, groups=["app-1", "other-1"], include_authorized_operations=True
        ),
        lambda r: sorted(
            (g.group_id, int(g.error_code), g.authorized_operations) for g in r.groups
        ),
    )
    await run(
        "find coordinator: DESCRIBE GROUP",
        "alice",
        request("find_coordinator", 4, key_type=0, coordinator_keys=["app-1", "other-1"]),
        lambda r: sorted((c.key, int(c.error_code)) for c in r.coordinators),
    )
    await run(
        "list groups: filtered by DESCRIBE GROUP",
        "alice",
        request("list_groups", 5, states_filter=[], types_filter=[]),
        lambda r: sorted(g.group_id for g in r.groups if g.group_id in ("app-1", "other-1")),
    )
    await run(
        "offset delete: no DELETE GROUP",
        "alice",
        request(
            "offset_delete",
            0,
            group_id="app-1",
            topics=[{"name": "orders", "partitions": [{"partition_index": 0}]}],
        ),
        lambda r: int(r.error_code),
    )
    await run(
        "classic heartbeat: no group READ",
        "bob",
        request(
            "heartbeat", 4, group_id="app-1", generation_id=1, member_id="m", group_instance_id=None
        ),
        lambda r: int(r.error_code),
    )
    await run(
        "classic heartbeat: allowed, unknown member",
        "alice",
        request(
            "heartbeat", 4, group_id="app-1", generation_id=1, member_id="m", group_instance_id=None
        ),
        lambda r: int(r.error_code),
    )
    await run(
        "consumer heartbeat: a subscribed topic not described",
        "alice",
        heartbeat("app-2", ["orders", "secrets"]),
        lambda r: int(r.error_code),
    )
    await run(
        "consumer heartbeat: allowed",
        "alice",
        heartbeat("app-3", ["orders"]),
        lambda r: int(r.error_code),
    )
    await run(
        "consumer heartbeat: no group READ",
        "bob",
        heartbeat("app-4", ["orders"]),
        lambda r: int(r.error_code),
    )
    await run(
        "metadata: named topics need DESCRIBE TOPIC",
        "alice",
        metadata(["orders", "secrets", "nowhere"]),
        lambda r: sorted((t.name, int(t.error_code), len(t.partitions)) for t in r.topics),
    )
    for user in ("alice", "bob"):
        await run(
            f"metadata: all topics filtered ({user})",
            user,
            metadata(None),
            lambda r: sorted((t.name, int(t.error_code)) for t in r.topics if t.name in TOPICS),
        )
    ids = await _topic_ids(connect)
    await run(
        "metadata by id: DESCRIBE TOPIC on its name",
        "alice",
        metadata_by_id([ids["orders"], ids["secrets"], UNKNOWN_ID]),
        # in no particular order in Kafka (clients match results by id)
        lambda r: sorted((int(t.error_code), t.name or "") for t in r.topics),
    )
    await run(
        "delete topics by id: DELETE TOPIC on its name, unknown id",
        "alice",
        request(
            "delete_topics",
            6,
            topics=[{"name": None, "topic_id": i} for i in (ids["orders"], UNKNOWN_ID)],
            timeout=5_000,
        ),
        lambda r: sorted(int(t.error_code) for t in r.responses),
    )
    out["consumer heartbeat: regex keeps the topics alice may describe"] = await regex_assignment(
        connect, "alice", "app-regex", "orders.*|secrets.*"
    )
    return out


UNKNOWN_ID = "AAAAAAAAAAAAAAAAAAAAAQ"


def metadata(topics: list[str] | None) -> Any:
    return request(
        "metadata",
        12,
        topics=None if topics is None else [{"name": t, "topic_id": None} for t in topics],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def metadata_by_id(ids: list[str]) -> Any:
    return request(
        "metadata",
        12,
        topics=[{"name": None, "topic_id": i} for i in ids],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


async def _topic_ids(connect: Callable[[str], Awaitable[KafkaWire]]) -> dict[str, Any]:
    r = await _as(connect, "admin", metadata(list(TOPICS)))
    from services.gateway.codec import from_uuid

    return {t.name: from_uuid(t.topic_id) for t in r.topics}


def _regex_heartbeat(group: str, member_id: str, epoch: int, regex: str | None) -> Any:
    joining = epoch == 0
    return request(
        "consumer_group_heartbeat",
        1,
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        instance_id=None,
        rack_id=None,
        rebalance_timeout=30_000 if joining else -1,
        subscribed_topic_names=None,
        subscribed_topic_regex=regex,
        server_assignor=None,
        topic_partitions=[] if joining else None,
    )


async def regex_assignment(
    connect: Callable[[str], Awaitable[KafkaWire]],
    user: str,
    group: str,
    regex: str,
    timeout_s: float = 20.0,
) -> Any:
    """The sorted topic names a new member of ``group`` subscribed with ``regex`` is
    assigned (heartbeats until the assignment arrives; Kafka resolves regexes in the
    background), or the heartbeat's error code."""
    admin = await connect("admin")
    try:
        md = await admin.send(request("metadata", 12, topics=None))
    finally:
        await admin.close()
    names = {t.topic_id: t.name for t in md.topics}
    w = await connect(user)
    try:
        member_id = uuid.uuid4().hex[:22]  # v1: the client names itself (KIP-1082)
        r = await w.send(_regex_heartbeat(group, member_id, 0, regex))
        deadline = asyncio.get_running_loop().time() + timeout_s
        while r.error_code == 0:
            if r.assignment is not None and r.assignment.topic_partitions:
                return sorted(
                    names.get(t.topic_id, str(t.topic_id)) for t in r.assignment.topic_partitions
                )
            if asyncio.get_running_loop().time() > deadline:
                return "no assignment"
            await asyncio.sleep(0.2)
            r = await w.send(_regex_heartbeat(group, member_id, r.member_epoch, None))
        return int(r.error_code)
    finally:
        await w.close()


# ---- CreateAcls / DescribeAcls / DeleteAcls ------------------------------------------------
# Kafka's wire codes: resource type GROUP 3, TOPIC 2, ANY 1; pattern LITERAL 3, PREFIXED 4,
# MATCH 2, ANY 1; operation READ 3, DESCRIBE 8, ANY 1; permission ALLOW 3, DENY 2, ANY 1.


def creation(
    rt: int, name: str, pattern: int, principal: str, op: int, perm: int
) -> dict[str, Any]:
    return {
        "resource_type": rt,
        "resource_name": name,
        "resource_pattern_type": pattern,
        "principal": principal,
        "host": "*",
        "operation": op,
        "permission_type": perm,
    }


def acl_filter(
    rt: int = 1, name: str | None = None, pattern: int = 1, principal: str | None = None
) -> dict[str, Any]:
    return {
        "resource_type_filter": rt,
        "resource_name_filter": name,
        "pattern_type_filter": pattern,
        "principal_filter": principal,
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
    }


def _described(r: Any) -> Any:
    return int(r.error_code), sorted(
        (
            int(res.resource_type),
            res.resource_name,
            int(res.pattern_type),
            a.principal,
            a.host,
            int(a.operation),
            int(a.permission_type),
        )
        for res in r.resources
        for a in res.acls
    )


async def run_acl_admin(connect: Callable[[str], Awaitable[KafkaWire]]) -> dict[str, Any]:
    import asyncio

    out: dict[str, Any] = {}

    async def send(user: str, req: Any) -> Any:
        return await _as(connect, user, req)

    def describe(**kw: Any) -> Any:
        return request("describe_acls", 3, **acl_filter(**kw))

    r = await send(
        "alice", request("create_acls", 3, creations=[creation(3, "x", 3, "User:dave", 3, 3)])
    )
    out["create: not authorized"] = [int(x.error_code) for x in r.results]
    out["describe: not authorized"] = _described(await send("alice", describe()))
    r = await send(
        "admin",
        request(
            "create_acls",
            3,
            creations=[
                creation(3, "adm-1", 3, "User:dave", 3, 3),
                creation(2, "adm-", 4, "User:dave", 8, 2),
            ],
        ),
    )
    out["create: admin"] = [int(x.error_code) for x in r.results]
    r = await send(
        "admin",
        request(
            "create_acls",
            3,
            creations=[
                creation(3, "adm-2", 3, "User:erin", 3, 3),
                creation(1, "any", 3, "User:erin", 3, 3),  # resource type ANY: invalid
            ],
        ),
    )
    out["create: one invalid"] = [int(x.error_code) for x in r.results]
    out["create: one invalid, what stays"] = _described(
        await send("admin", describe(principal="User:erin"))
    )
    for _ in range(50):  # Kafka's authorizer applies new ACLs from its metadata log
        dave = _described(await send("admin", describe(principal="User:dave")))
        if len(dave[1]) == 2:
            break
        await asyncio.sleep(0.1)
    out["describe: by principal"] = dave
    out["describe: MATCH a topic name"] = _described(
        await send("admin", describe(rt=2, name="adm-1", pattern=2))
    )
    out["describe: LITERAL name"] = _described(
        await send("admin", describe(name="adm-1", pattern=3))
    )
    r = await send(
        "admin", request("delete_acls", 3, filters=[acl_filter(rt=3, principal="User:dave")])
    )
    out["delete: by filter"] = [
        (
            int(f.error_code),
            sorted((m.resource_name, int(m.operation), int(m.error_code)) for m in f.matching_acls),
        )
        for f in r.filter_results
    ]
    for _ in range(50):
        dave = _described(await send("admin", describe(principal="User:dave")))
        if len(dave[1]) == 1:
            break
        await asyncio.sleep(0.1)
    out["describe: after delete"] = dave
    return out
