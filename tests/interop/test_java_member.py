"""The Java member library (``clients/java-member``, issue 43) against real servers: its
example ``EventPrinter`` (every callback a JSON line) run as separate processes.

On ``groupcoord dev``: three members converge to a balanced, disjoint assignment; one is
SIGSTOPped past the session timeout, is fenced, and on SIGCONT reports its partitions lost
and rejoins with the same member id; one closes (revokes, commits, leaves). Static members
(UNRELEASED_INSTANCE_ID, the takeover after a -2 leave, FENCED_INSTANCE_ID), a revocation
blocked past the session timeout that does not fence the member (the heartbeats go on beside
the callback) and one past the rebalance timeout that does, a regex subscription, mutual TLS
(and a member without a client certificate refused), a client-side assignor with per-member
metadata, and a member of each library (Java, Go's ``member-example``, ``python -m
groupcoord.client``) in one group. On three shards on Redis: the group's shard killed -9, the
members follow the group. ``--print-heartbeats`` members check that heartbeats carry only what
changed (and the full request after joining, fencing and a re-route). An
invariant checker replays every member's callback events in time order: no partition is
owned by two members at once, except by a member that later reports it lost (fenced: the
coordinator gave it away meanwhile).

Built at test time with Maven (and Go, cached); no skip: CI has Maven, a JDK and Go."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from groupcoord.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2, consumer_group_pb2, offsets_pb2

from services.client.coordinator_client import CoordinatorClient
from services.process.tls import ClientTls
from tests.integration.multishard.cluster import Cluster
from tests.interop import generated_clients
from tests.interop.generated_clients import ToolMissing
from tests.interop.kafka_broker import groupcoord_args
from tests.support.certs import Ca
from tests.support.processes import ServerProcess
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.timeout(600)]

PARTITIONS = 6
SESSION_TIMEOUT_MS = 2000
COMMIT_BASE = 1000
#: the 3-shard cluster's settings: a session timeout longer than the failover (a lease of
#: 1.5 s, then the group loaded from Redis)
SHARDS_CONFIG = (
    "consumer_group_heartbeat_interval_ms=300,consumer_group_min_heartbeat_interval_ms=100,"
    "consumer_group_session_timeout_ms=10000,consumer_group_min_session_timeout_ms=1000"
)
SETTLE_S = 45.0

Partition = tuple[str, int]


def fast_args() -> list[str]:
    """The interop settings (heartbeat 500 ms) with a 2 s session timeout, so that a stopped
    member is fenced quickly."""
    args = groupcoord_args()
    i = args.index("--set") + 1
    args[i] = args[i].replace(
        "consumer_group_session_timeout_ms=6000",
        f"consumer_group_session_timeout_ms={SESSION_TIMEOUT_MS}",
    )
    assert f"consumer_group_session_timeout_ms={SESSION_TIMEOUT_MS}" in args[i], args
    return args


@pytest.fixture(scope="module")
def member_cmd() -> list[str]:
    started = time.monotonic()
    try:
        cmd = generated_clients.java_member()
    except ToolMissing as ex:
        pytest.fail(str(ex))
    print(f"java_member: ready in {time.monotonic() - started:.1f} s")
    return cmd


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess.dev(tmp_path_factory.mktemp("java-member"), *fast_args())
    try:
        yield proc
    finally:
        proc.kill()


class Member:
    """One EventPrinter process and the JSON events it printed so far."""

    def __init__(self, cmd: list[str], *args: str) -> None:
        self.proc = subprocess.Popen(
            [*cmd, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: list[dict[str, Any]] = []
        self.lines: list[str] = []
        self.stderr = ""
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            self.events.append(json.loads(line))

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()

    @property
    def member_id(self) -> str | None:
        events = list(self.events)
        return events[0]["member_id"] if events else None

    def callbacks(self) -> list[dict[str, Any]]:
        """The events but the diagnostics (``heartbeat``, ``computed``)."""
        return [e for e in list(self.events) if e["event"] not in ("heartbeat", "computed")]

    def heartbeats(self) -> list[dict[str, Any]]:
        """``--print-heartbeats``: one event per heartbeat sent (code -1: no answer)."""
        return [e for e in list(self.events) if e["event"] == "heartbeat"]

    def owned(self) -> set[Partition]:
        """What the member owns as its callbacks said."""
        owned: set[Partition] = set()
        for e in self.callbacks():
            parts = {(t, p) for t, p in e.get("partitions", [])}
            if e["event"] == "assigned":
                assert not parts & owned, f"assigned what it owns: {e}"
                owned |= parts
            elif e["event"] in ("revoked", "lost"):
                assert parts <= owned, f"{e['event']} what it does not own: {e}"
                owned -= parts
        return owned

    def kinds(self) -> list[str]:
        return [e["event"] for e in self.callbacks()]

    def close(self, timeout: float = 30) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)

    def describe_for_failure(self) -> str:
        return f"member {self.member_id}: {''.join(self.lines)}\nstderr: {self.stderr[-2000:]}"


def check_no_double_ownership(members: list[Member]) -> None:
    """Replays every member's callback events in time order (a revocation before an
    assignment of the same millisecond): a partition assigned to one member while another
    owns it is a violation, unless that other member later reports it lost."""
    timeline = []
    for i, m in enumerate(members):
        for n, e in enumerate(list(m.events)):
            if e["event"] in ("assigned", "revoked", "lost"):
                timeline.append((e["ms"], 0 if e["event"] != "assigned" else 1, i, n, e))
    timeline.sort(key=lambda x: x[:4])
    owner: dict[Partition, int] = {}
    for _, _, i, _, e in timeline:
        for t, p in e["partitions"]:
            tp = (t, p)
            if e["event"] == "assigned":
                previous = owner.get(tp)
                if previous is not None and previous != i:
                    lost_later = any(
                        x["event"] == "lost" and [t, p] in x["partitions"] and x["ms"] >= e["ms"]
                        for x in list(members[previous].events)
                    )
                    details = "\n".join(m.describe_for_failure() for m in members)
                    assert lost_later, (
                        f"{tp} assigned to {members[i].member_id} at {e['ms']} while "
                        f"{members[previous].member_id} owns it (and never reports it lost)\n"
                        f"{details}"
                    )
                owner[tp] = i
            elif owner.get(tp) == i:
                del owner[tp]


async def describe(
    bootstrap: list[str], group: str, tls: ClientTls | None = None
) -> consumer_group_pb2.ConsumerGroupDescribedGroup:
    """The group as its coordinator describes it (found and re-routed by the project's
    client)."""
    async with CoordinatorClient(bootstrap, tls=tls) as client:
        described: consumer_group_pb2.ConsumerGroupDescribedGroup = (
            await client.consumer_group_describe(group, timeout_s=30)
        )
    assert described.error_code == 0, described
    return described


async def committed(bootstrap: list[str], group: str) -> dict[Partition, int]:
    async with CoordinatorClient(bootstrap) as client:
        fetched = await client.offset_fetch(offsets_pb2.OffsetFetchRequestGroup(group_id=group))
    assert fetched.error_code == 0, fetched
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in fetched.topics
        for p in t.partitions
    }


async def coordinator(bootstrap: list[str], group: str) -> str:
    async with CoordinatorClient(bootstrap) as client:
        return (await client.find_coordinator(group)).address


async def create_topic(address: str, topic: str, tls: ClientTls | None = None) -> None:
    async with CoordinatorClient(address, tls=tls) as client:
        stub = catalog_pb2_grpc.TopicCatalogStub(client.channel(address))
        response = await stub.CreateTopics(
            catalog_pb2.CreateTopicsRequest(
                topics=[catalog_pb2.CreatableTopic(name=topic, num_partitions=PARTITIONS)]
            ),
            timeout=10,
        )
    assert response.topics[0].error_code == 0, response


async def wait_balanced(
    bootstrap: list[str],
    group: str,
    members: list[Member],
    topic: str,
    tls: ClientTls | None = None,
) -> None:
    """Until the members' callbacks say they own disjoint, equal shares of every partition
    and the coordinator agrees (Stable, these members, every one at the group epoch)."""
    want = {(topic, p) for p in range(PARTITIONS)}
    share = PARTITIONS // len(members)
    deadline = time.monotonic() + SETTLE_S
    last = ""
    while time.monotonic() < deadline:
        owned = [m.owned() for m in members]
        union = set().union(*owned)
        if union == want and all(len(o) == share for o in owned):
            d = await describe(bootstrap, group, tls)
            ids = {m.member_id for m in members}
            if (
                d.group_state == "Stable"
                and {x.member_id for x in d.members} == ids
                and all(x.member_epoch == d.group_epoch for x in d.members)
            ):
                # checked once settled: a stopped member reports its loss only when resumed
                check_no_double_ownership(members)
                return
            last = f"describe: {d}"
        else:
            last = f"owned: {owned}"
        await asyncio.sleep(0.2)
    details = "\n".join(m.describe_for_failure() for m in members)
    pytest.fail(f"not balanced within {SETTLE_S} s ({last})\n{details}")


def check_commits(members: list[Member]) -> None:
    """Every revocation committed BASE + partition for what it revoked and read it back."""
    for m in members:
        events = m.callbacks()
        for before, e in zip(events, events[1:], strict=False):
            if e["event"] == "committed":
                assert before["event"] == "revoked", m.describe_for_failure()
                assert e["partitions"] == before["partitions"], m.describe_for_failure()
                assert e["errors"] == [], m.describe_for_failure()
                assert e["fetched"] == [COMMIT_BASE + p for _, p in e["partitions"]], e


def check_heartbeats_carry_only_changes(member: Member) -> None:
    """A member's heartbeats (``--print-heartbeats``) carry the subscription only when
    joining (epoch 0) or after a heartbeat that failed (a re-route, an error); the owned
    partitions then too, and otherwise only when they differ from what the coordinator was
    last told."""
    reported: list[Any] | None = None
    full = True
    for h in member.heartbeats():
        whole = full or h["epoch"] == 0
        assert h["subscription"] == whole, (h, member.describe_for_failure())
        if whole:
            assert h["owned"] is not None, (h, member.describe_for_failure())
        elif h["owned"] is not None:
            assert sorted(h["owned"]) != reported, (h, member.describe_for_failure())
        if h["code"] == 0:
            full = False
            if h["owned"] is not None:
                reported = sorted(h["owned"])
        else:
            full = True


async def test_java_members_converge_survive_fencing_and_leave(
    server: ServerProcess, member_cmd: list[str]
) -> None:
    bootstrap = [server.grpc_address]
    group, topic = f"jm-{uuid.uuid4().hex[:8]}", f"jm-{uuid.uuid4().hex[:8]}"
    await create_topic(server.grpc_address, topic)
    args = [
        *("--bootstrap", server.grpc_address, "--group", group, "--topics", topic),
        *("--commit-offset", str(COMMIT_BASE)),
    ]
    # member 0 (the one stopped below) also prints every heartbeat it sends
    members = [
        Member(member_cmd, *args, *(["--print-heartbeats"] if n == 0 else [])) for n in range(3)
    ]
    try:
        await wait_balanced(bootstrap, group, members, topic)
        first_ids = [m.member_id for m in members]

        # fenced: member 0 stopped past the session timeout; the others take its partitions
        stopped = members[0]
        had = stopped.owned()
        os.kill(stopped.proc.pid, signal.SIGSTOP)
        try:
            await wait_balanced(bootstrap, group, members[1:], topic)
        finally:
            os.kill(stopped.proc.pid, signal.SIGCONT)
        await wait_balanced(bootstrap, group, members, topic)
        kinds = stopped.kinds()
        lost = [e for e in stopped.events if e["event"] == "lost"]
        assert len(lost) == 1, stopped.describe_for_failure()
        assert {(t, p) for t, p in lost[0]["partitions"]} == had
        after_lost = kinds[kinds.index("lost") + 1 :]
        # nothing revoked after the loss: the member rejoined owning nothing, then was assigned
        assert after_lost[:2] == ["joined", "assigned"], stopped.describe_for_failure()
        assert [m.member_id for m in members] == first_ids  # the member id survived fencing
        # the heartbeat that found it fenced, then the loss, then a full join at epoch 0 that
        # reports nothing owned
        events = list(stopped.events)
        at = [e["event"] for e in events].index("lost")
        before = [e for e in events[:at] if e["event"] == "heartbeat"][-1]
        after = [e for e in events[at:] if e["event"] == "heartbeat"][0]
        assert before["code"] in (25, 110) and before["epoch"] > 0, before
        assert (after["epoch"], after["subscription"], after["owned"]) == (0, True, []), after
        check_heartbeats_carry_only_changes(stopped)

        # close: member 2 revokes what it owns (committing offsets for it), leaves, and the
        # group rebalances to the others
        leaving = members[2]
        owned_before = leaving.owned()
        assert leaving.close() == 0, leaving.describe_for_failure()
        assert leaving.kinds()[-3:] == ["revoked", "committed", "left"], (
            leaving.describe_for_failure()
        )
        assert {(t, p) for t, p in leaving.callbacks()[-3]["partitions"]} == owned_before
        assert leaving.owned() == set()
        await wait_balanced(bootstrap, group, members[:2], topic)

        for m in members[:2]:
            assert m.close() == 0, m.describe_for_failure()
        check_no_double_ownership(members)
        check_commits(members)
        for m in members:
            assert "error" not in m.kinds(), m.describe_for_failure()
        d = await describe(bootstrap, group)
        assert (d.group_state, list(d.members)) == ("Empty", [])
        # the last two closed members revoked, and committed, every partition between them
        assert await committed(bootstrap, group) == {
            (topic, p): COMMIT_BASE + p for p in range(PARTITIONS)
        }
    finally:
        for m in members:
            m.kill()


async def test_java_members_follow_their_group_when_its_shard_is_killed(
    member_cmd: list[str], redis_server: RedisServer, tmp_path: Path
) -> None:
    # 3 shard processes on a real Redis; the shard owning the group is killed (kill -9): its
    # partition's lease expires, another shard loads the group, and the members find it
    # (FindCoordinator again) and carry on with their epochs -- nothing lost or revoked
    (tmp_path / "shards").mkdir()
    cluster = Cluster(
        tmp_path / "shards",
        redis_server,
        num_partitions=12,
        prefix=f"jm{uuid.uuid4().hex[:6]}",
        config=SHARDS_CONFIG,
    )
    members: list[Member] = []
    try:
        for n in range(3):
            cluster.start(n)
        await cluster.wait_settled()
        bootstrap = cluster.addresses()
        group, topic = f"jm-{uuid.uuid4().hex[:8]}", f"jm-{uuid.uuid4().hex[:8]}"
        await create_topic(bootstrap[0], topic)
        args = ["--bootstrap", ",".join(bootstrap), "--group", group, "--topics", topic]
        members = [Member(member_cmd, *args, "--print-heartbeats") for _ in range(3)]
        await wait_balanced(bootstrap, group, members, topic)
        before = {m.member_id: m.owned() for m in members}

        owner = await coordinator(bootstrap, group)
        (victim,) = [n for n, s in cluster.shards.items() if s.grpc_address == owner]
        cluster.kill(victim)
        survivors = cluster.addresses()
        await cluster.wait_settled()
        assert await coordinator(survivors, group) != owner
        # the new owner has the group as it was: the same members, epochs and assignment
        await wait_balanced(survivors, group, members, topic)
        assert {m.member_id: m.owned() for m in members} == before
        for m in members:
            assert m.kinds() == ["joined", "assigned", *m.kinds()[2:]]
            assert "lost" not in m.kinds(), m.describe_for_failure()
            # the re-route: heartbeats failed (the shard gone, or not the coordinator), and
            # the first answered one after them was the full request (subscription, owned)
            # (the new owner has the group from the store before a member's backoff ends:
            # wait for its first answered heartbeat)
            deadline = time.monotonic() + SETTLE_S
            while True:
                beats = m.heartbeats()
                codes = [h["code"] for h in beats]
                failed = next((i for i, c in enumerate(codes) if c != 0), None)
                assert failed is not None, m.describe_for_failure()
                resumed = next((h for h in beats[failed:] if h["code"] == 0), None)
                if resumed is not None:
                    break
                assert time.monotonic() < deadline, m.describe_for_failure()
                await asyncio.sleep(0.1)
            assert resumed["subscription"] and len(resumed["owned"]) == 2, resumed
            check_heartbeats_carry_only_changes(m)

        # the members talk to the new owner: one leaves, the other two are given its share
        # there (each gets an assignment after the leave)
        left_at_ms = time.time() * 1000
        assert members[2].close() == 0, members[2].describe_for_failure()
        await wait_balanced(survivors, group, members[:2], topic)
        for m in members[:2]:
            assert any(e["event"] == "assigned" and e["ms"] > left_at_ms for e in m.events), (
                m.describe_for_failure()
            )
            assert m.close() == 0, m.describe_for_failure()
        check_no_double_ownership(members)
        for m in members:
            assert {"error", "lost"}.isdisjoint(m.kinds()), m.describe_for_failure()
        d = await describe(survivors, group)
        assert (d.group_state, list(d.members)) == ("Empty", [])
    finally:
        for m in members:
            m.kill()
        cluster.close()


async def test_java_static_member_conflict_then_takeover_after_its_temporary_leave(
    server: ServerProcess, member_cmd: list[str]
) -> None:
    # static membership: a second process with an instance id in use is refused with
    # UNRELEASED_INSTANCE_ID (111, reported, retried with backoff); once the first closes
    # (revoked, then the epoch -2 leave) the second takes its place with the same partitions
    bootstrap = [server.grpc_address]
    group, topic = f"jm-{uuid.uuid4().hex[:8]}", f"jm-{uuid.uuid4().hex[:8]}"
    await create_topic(server.grpc_address, topic)
    args = ["--bootstrap", server.grpc_address, "--group", group, "--topics", topic]
    first = Member(member_cmd, *args, "--instance-id", "i1")
    other = Member(member_cmd, *args, "--instance-id", "i2")
    members = [first, other]
    try:
        await wait_balanced(bootstrap, group, [first, other], topic)
        had = first.owned()
        second = Member(member_cmd, *args, "--instance-id", "i1")
        members.append(second)
        deadline = time.monotonic() + SETTLE_S
        while not any(e.get("code") == 111 for e in second.events):
            assert time.monotonic() < deadline, second.describe_for_failure()
            await asyncio.sleep(0.1)
        assert "assigned" not in second.kinds(), second.describe_for_failure()

        assert first.close() == 0, first.describe_for_failure()
        assert first.kinds()[-2:] == ["revoked", "left"], first.describe_for_failure()
        await wait_balanced(bootstrap, group, [second, other], topic)
        assert second.owned() == had
        check_no_double_ownership(members)
        for m in (second, other):
            assert m.close() == 0, m.describe_for_failure()
        assert "error" not in first.kinds() + other.kinds()
        # a static member's leave (epoch -2) keeps its place and assignment for the session
        # timeout, then the coordinator removes it
        d = await describe(bootstrap, group)
        assert sorted((x.instance_id, x.member_epoch) for x in d.members) == [
            ("i1", -2),
            ("i2", -2),
        ], d
        deadline = time.monotonic() + 5 * SESSION_TIMEOUT_MS / 1000
        while (d := await describe(bootstrap, group)).members:
            assert time.monotonic() < deadline, d
            await asyncio.sleep(0.2)
        assert d.group_state == "Empty"
    finally:
        for m in members:
            m.kill()


async def test_java_static_member_whose_instance_id_is_taken_over_is_fenced(
    server: ServerProcess, member_cmd: list[str]
) -> None:
    # another process takes the static member's instance id over (here raw heartbeats from
    # Python: a temporary leave, epoch -2, in the member's name, then a join with `i1` and a
    # new member id): the member's next heartbeat is answered FENCED_INSTANCE_ID (82) -- an
    # error line, its partitions lost -- and its joins are refused UNRELEASED_INSTANCE_ID
    # (111) until the other process leaves; then it gets every partition again
    bootstrap = [server.grpc_address]
    group, topic = f"jm-{uuid.uuid4().hex[:8]}", f"jm-{uuid.uuid4().hex[:8]}"
    await create_topic(server.grpc_address, topic)
    args = ["--bootstrap", server.grpc_address, "--group", group, "--topics", topic]
    member = Member(member_cmd, *args, "--instance-id", "i1")
    everything = {(topic, p) for p in range(PARTITIONS)}
    try:
        await wait_balanced(bootstrap, group, [member], topic)
        other = uuid.uuid4().hex[:22]
        async with CoordinatorClient(bootstrap) as client:

            async def heartbeat(**fields: Any) -> consumer_group_pb2.ConsumerGroupHeartbeatResponse:
                request = consumer_group_pb2.ConsumerGroupHeartbeatRequest(
                    group_id=group, instance_id="i1", **fields
                )
                response: consumer_group_pb2.ConsumerGroupHeartbeatResponse = await client.call(
                    group, "ConsumerGroupHeartbeat", request
                )
                return response

            # (the member paused meanwhile -- far less than its session timeout -- so that no
            # heartbeat of its own comes between the two)
            os.kill(member.proc.pid, signal.SIGSTOP)
            try:
                left = await heartbeat(member_id=member.member_id, member_epoch=-2)
                joined = await heartbeat(
                    member_id=other,
                    member_epoch=0,
                    rebalance_timeout_ms=30000,
                    subscribed_topic_names=common_pb2.StringList(values=[topic]),
                    topic_partitions=common_pb2.TopicPartitionsList(),
                )
            finally:
                os.kill(member.proc.pid, signal.SIGCONT)
            assert (left.error_code, joined.error_code) == (0, 0), (left, joined)
            deadline = time.monotonic() + SETTLE_S
            while not {82, 111} <= {e.get("code") for e in member.events}:
                assert time.monotonic() < deadline, member.describe_for_failure()
                await asyncio.sleep(0.1)
            codes = [e["code"] for e in member.events if e["event"] == "error"]
            assert codes[0] == 82 and set(codes) == {82, 111}, member.describe_for_failure()
            assert member.kinds()[:4] == ["joined", "assigned", "error", "lost"], (
                member.describe_for_failure()
            )
            assert {(t, p) for t, p in member.callbacks()[3]["partitions"]} == everything
            assert member.owned() == set()
            gone = await heartbeat(member_id=other, member_epoch=-1)
            assert gone.error_code == 0, gone
        deadline = time.monotonic() + SETTLE_S
        while member.owned() != everything:
            assert time.monotonic() < deadline, member.describe_for_failure()
            await asyncio.sleep(0.1)
        assert member.close() == 0, member.describe_for_failure()
        assert member.kinds()[-2:] == ["revoked", "left"], member.describe_for_failure()
    finally:
        member.kill()


async def test_java_member_keeps_heartbeating_while_its_revocation_blocks(
    server: ServerProcess, member_cmd: list[str]
) -> None:
    # the callbacks run on their own thread: a revocation that blocks 3.5 s -- longer than
    # the session timeout (2 s), shorter than the rebalance timeout (30 s) -- does not get
    # the member fenced. Its heartbeats go on meanwhile, reporting the partitions it owned
    # before; once the callback returns it reports what is left at once, and only then does
    # the coordinator give the revoked partitions to the other member
    bootstrap = [server.grpc_address]
    group, topic = f"jm-{uuid.uuid4().hex[:8]}", f"jm-{uuid.uuid4().hex[:8]}"
    await create_topic(server.grpc_address, topic)
    args = ["--bootstrap", server.grpc_address, "--group", group, "--topics", topic]
    delay_ms = SESSION_TIMEOUT_MS + 1500
    slow = Member(member_cmd, *args, "--revoke-delay-ms", str(delay_ms), "--print-heartbeats")
    members = [slow]
    try:
        await wait_balanced(bootstrap, group, [slow], topic)
        members.append(fast := Member(member_cmd, *args))
        await wait_balanced(bootstrap, group, [slow, fast], topic)
        assert slow.kinds() == ["joined", "assigned", "revoked"], slow.describe_for_failure()
        assert fast.kinds() == ["joined", "assigned"], fast.describe_for_failure()
        assigned, revoked = ({(t, p) for t, p in e["partitions"]} for e in slow.callbacks()[1:3])
        assert len(assigned) == PARTITIONS and len(revoked) == PARTITIONS // 2
        started = slow.callbacks()[2]["ms"]
        ended = started + delay_ms
        # the other member got the revoked partitions only after the callback returned
        assert {(t, p) for t, p in fast.callbacks()[1]["partitions"]} == revoked
        assert fast.callbacks()[1]["ms"] >= ended, fast.describe_for_failure()
        # heartbeats every ~500 ms while the callback blocked, answered without error, none
        # reporting fewer partitions than the member owned before
        beats = slow.heartbeats()
        during = [h for h in beats if started < h["ms"] < ended]
        assert len(during) >= 4, slow.describe_for_failure()
        for h in during:
            assert h["code"] == 0 and h["owned"] is None, slow.describe_for_failure()
        # what it owns was reported three times: nothing (joining), everything, what is left
        reports = [(h["ms"], {p for _, p in h["owned"]}) for h in beats if h["owned"] is not None]
        left = {p for _, p in assigned - revoked}
        assert [r for _, r in reports] == [set(), set(range(PARTITIONS)), left], reports
        assert reports[2][0] >= ended, reports
        assert fast.callbacks()[1]["ms"] >= reports[2][0], fast.describe_for_failure()
        check_heartbeats_carry_only_changes(slow)
        for m in members:
            assert m.close() == 0, m.describe_for_failure()
            assert {"error", "lost"}.isdisjoint(m.kinds()), m.describe_for_failure()
        check_no_double_ownership(members)
        d = await describe(bootstrap, group)
        assert (d.group_state, list(d.members)) == ("Empty", [])
    finally:
        for m in members:
            m.kill()


async def test_java_member_fenced_while_its_revocation_outlasts_the_rebalance_timeout(
    server: ServerProcess, member_cmd: list[str]
) -> None:
    # a revocation that blocks past the member's rebalance timeout (1.5 s; the callback
    # blocks 3.5 s): the coordinator removes the member, and a heartbeat sent while the
    # callback still runs is answered fenced. The member lets the callback finish, then
    # reports what it still owned lost and rejoins at epoch 0 with the same id
    bootstrap = [server.grpc_address]
    group, topic = f"jm-{uuid.uuid4().hex[:8]}", f"jm-{uuid.uuid4().hex[:8]}"
    await create_topic(server.grpc_address, topic)
    args = ["--bootstrap", server.grpc_address, "--group", group, "--topics", topic]
    delay_ms = SESSION_TIMEOUT_MS + 1500
    slow = Member(
        member_cmd,
        *args,
        *("--revoke-delay-ms", str(delay_ms), "--rebalance-timeout-ms", "1500"),
        "--print-heartbeats",
    )
    members = [slow]
    try:
        await wait_balanced(bootstrap, group, [slow], topic)
        members.append(fast := Member(member_cmd, *args))
        await wait_balanced(bootstrap, group, [slow, fast], topic)
        kinds = slow.kinds()
        assert kinds == ["joined", "assigned", "revoked", "lost", "joined", "assigned"], (
            slow.describe_for_failure()
        )
        everything, revoked, lost = (
            {(t, p) for t, p in e["partitions"]} for e in slow.callbacks()[1:4]
        )
        assert len(revoked) == PARTITIONS // 2 and lost == everything - revoked
        started = slow.callbacks()[2]["ms"]
        lost_ms = slow.callbacks()[3]["ms"]
        assert lost_ms >= started + delay_ms, slow.describe_for_failure()
        beats = slow.heartbeats()
        fenced = next(h for h in beats if h["code"] in (25, 110))
        assert started < fenced["ms"] < started + delay_ms, slow.describe_for_failure()
        rejoin = next(h for h in beats if h["ms"] > fenced["ms"] and h["code"] != -1)
        assert (rejoin["epoch"], rejoin["owned"]) == (0, []) and rejoin["ms"] >= lost_ms, rejoin
        check_heartbeats_carry_only_changes(slow)
        assert "lost" not in fast.kinds()
        for m in members:
            assert m.close() == 0, m.describe_for_failure()
        check_no_double_ownership(members)
        d = await describe(bootstrap, group)
        assert (d.group_state, list(d.members)) == ("Empty", [])
    finally:
        for m in members:
            m.kill()


async def test_java_members_over_mutual_tls_with_a_server_name_override(
    member_cmd: list[str], tmp_path: Path
) -> None:
    # `groupcoord dev` serving gRPC over TLS only, client certificates required, with a
    # certificate for a name that is not the address dialled (127.0.0.1): the members trust
    # the test CA, present their own certificate and check the server's against that name
    ca = Ca()
    cafile = str(ca.write(tmp_path))
    server_cert = ca.issue(tmp_path, "server", hosts=("groupcoord.test",))
    app = ca.issue(tmp_path, "app")
    tls = ClientTls(cafile, str(app.cert), str(app.key), "groupcoord.test")
    server = ServerProcess.dev(
        tmp_path / "dev",
        *fast_args(),
        *("--tls-cafile", cafile, "--tls-certfile", str(server_cert.cert)),
        *("--tls-keyfile", str(server_cert.key), "--tls-client-auth", "required"),
    )
    members: list[Member] = []
    try:
        bootstrap = [server.grpc_address]
        group, topic = f"jm-{uuid.uuid4().hex[:8]}", f"jm-{uuid.uuid4().hex[:8]}"
        await create_topic(server.grpc_address, topic, tls)
        args = [
            *("--bootstrap", server.grpc_address, "--group", group, "--topics", topic),
            *("--tls-ca", cafile, "--tls-cert", str(app.cert), "--tls-key", str(app.key)),
            *("--tls-server-name", "groupcoord.test"),
        ]
        members = [Member(member_cmd, *args) for _ in range(2)]
        # a third member trusts the CA but has no client certificate: the server refuses it
        without_cert = [
            *("--bootstrap", server.grpc_address, "--group", group, "--topics", topic),
            *("--tls-ca", cafile, "--tls-server-name", "groupcoord.test"),
        ]
        refused = Member(member_cmd, *without_cert)
        members.append(refused)
        await wait_balanced(bootstrap, group, members[:2], topic, tls)
        assert refused.proc.poll() is None and refused.kinds() == [], refused.describe_for_failure()
        refused.proc.terminate()
        assert refused.proc.wait(30) == 143, refused.describe_for_failure()
        assert refused.kinds() == ["left"], refused.describe_for_failure()
        members.remove(refused)
        # one leaves on SIGTERM (the example's shutdown hook), the other at end of input
        members[0].proc.terminate()
        assert members[0].proc.wait(30) == 143, members[0].describe_for_failure()
        assert members[1].close() == 0, members[1].describe_for_failure()
        for m in members:
            assert m.kinds()[-2:] == ["revoked", "left"], m.describe_for_failure()
        d = await describe(bootstrap, group, tls)
        assert (d.group_state, list(d.members)) == ("Empty", [])
    finally:
        for m in members:
            m.kill()
        server.kill()


async def test_java_member_subscribed_by_regex_gets_every_matching_topic(
    server: ServerProcess, member_cmd: list[str]
) -> None:
    # `pattern(...)`: the coordinator evaluates the RE2 regex; the member names the partitions
    # of several topics from their ids (the topic catalog), including a topic created after
    # it joined
    bootstrap = [server.grpc_address]
    tag = uuid.uuid4().hex[:8]
    group = f"jm-{tag}"
    for topic in (f"jmre-{tag}-a", f"jmre-{tag}-b", f"jmother-{tag}"):
        await create_topic(server.grpc_address, topic)
    args = ["--bootstrap", server.grpc_address, "--group", group, "--pattern", f"jmre-{tag}-.*"]
    member = Member(member_cmd, *args)
    try:

        def want(*suffixes: str) -> set[Partition]:
            return {(f"jmre-{tag}-{s}", p) for s in suffixes for p in range(PARTITIONS)}

        async def owns(expected: set[Partition]) -> None:
            deadline = time.monotonic() + SETTLE_S
            while member.owned() != expected:
                assert time.monotonic() < deadline, member.describe_for_failure()
                await asyncio.sleep(0.1)

        await owns(want("a", "b"))
        await create_topic(server.grpc_address, f"jmre-{tag}-c")
        await owns(want("a", "b", "c"))
        assert member.close() == 0, member.describe_for_failure()
        assert {"error", "lost"}.isdisjoint(member.kinds()), member.describe_for_failure()
        d = await describe(bootstrap, group)
        assert (d.group_state, list(d.members)) == ("Empty", [])
    finally:
        member.kill()


async def test_java_members_compute_the_assignment_with_their_client_side_assignor(
    server: ServerProcess, member_cmd: list[str]
) -> None:
    # `--client-assignor rr`: the members declare a client-side round-robin assignor and ask
    # for it by name; the chosen member prepares, assigns (off its heartbeat thread) and
    # installs each target -- the partitions dealt to the members sorted by id, which no
    # server-side assignor does. Each member declares its own metadata (`--assignor-metadata
    # mN`): the computing member's assignor sees every member's; the metadata it gives each
    # member ("rank/n") reaches that member with its assignment (in a heartbeat's answer)
    bootstrap = [server.grpc_address]
    group, topic = f"jm-{uuid.uuid4().hex[:8]}", f"jm-{uuid.uuid4().hex[:8]}"
    await create_topic(server.grpc_address, topic)
    args = [
        *("--bootstrap", server.grpc_address, "--group", group, "--topics", topic),
        *("--client-assignor", "rr"),
    ]

    def start(n: int) -> Member:
        return Member(member_cmd, *args, "--assignor-metadata", f"m{n}", "--print-heartbeats")

    members = [start(n) for n in range(2)]
    try:
        for n in (2, 3):
            if n == 3:
                members.append(start(2))
            await wait_balanced(bootstrap, group, members, topic)
            by_id = sorted(members, key=lambda m: m.member_id or "")
            assert [m.owned() for m in by_id] == [
                {(topic, p) for p in range(PARTITIONS) if p % n == i} for i in range(n)
            ], "\n".join(m.describe_for_failure() for m in members)
            d = await describe(bootstrap, group)
            assert d.assignor_name == "rr", d
            # the latest computation (of the group's epoch) saw the members' metadata
            computed = [e for m in members for e in m.events if e["event"] == "computed"]
            latest = max(computed, key=lambda e: e["group_epoch"])
            assert latest["group_epoch"] == d.group_epoch, (latest, d)
            assert latest["metadata"] == {m.member_id: f"m{i}" for i, m in enumerate(members)}
            for rank, m in enumerate(by_id):
                given = [h["assignor_metadata"] for h in m.heartbeats() if h["assignor_metadata"]]
                assert given[-1] == f"{rank}/{n}", m.describe_for_failure()
        for m in members:
            assert m.close() == 0, m.describe_for_failure()
            assert "error" not in m.kinds(), m.describe_for_failure()
        check_no_double_ownership(members)
    finally:
        for m in members:
            m.kill()


async def test_java_go_and_python_members_share_a_group(
    server: ServerProcess, member_cmd: list[str]
) -> None:
    # a member of each library in one group -- Java (EventPrinter), Go (member-example) and
    # Python (`python -m groupcoord.client`), which print the same JSON lines: balanced, one
    # checker over all their events; the Python member leaves and the other two take its share
    try:
        go_member = generated_clients.go_member_example()
    except ToolMissing as ex:
        pytest.fail(str(ex))
    bootstrap = [server.grpc_address]
    group, topic = f"jm-{uuid.uuid4().hex[:8]}", f"jm-{uuid.uuid4().hex[:8]}"
    await create_topic(server.grpc_address, topic)
    args = ["--bootstrap", server.grpc_address, "--group", group, "--topics", topic]
    go_args = ["-bootstrap", server.grpc_address, "-group", group, "-topics", topic]
    python_member = [sys.executable, "-m", "groupcoord.client"]
    members = [Member(member_cmd, *args), Member(go_member, *go_args), Member(python_member, *args)]
    try:
        await wait_balanced(bootstrap, group, members, topic)
        leaving = members[2]
        owned_before = leaving.owned()
        assert leaving.close() == 0, leaving.describe_for_failure()
        assert leaving.kinds()[-2:] == ["revoked", "left"], leaving.describe_for_failure()
        assert {(t, p) for t, p in leaving.callbacks()[-2]["partitions"]} == owned_before
        await wait_balanced(bootstrap, group, members[:2], topic)
        for m in members[:2]:
            assert m.close() == 0, m.describe_for_failure()
        check_no_double_ownership(members)
        for m in members:
            assert {"error", "lost"}.isdisjoint(m.kinds()), m.describe_for_failure()
        d = await describe(bootstrap, group)
        assert (d.group_state, list(d.members)) == ("Empty", [])
    finally:
        for m in members:
            m.kill()
