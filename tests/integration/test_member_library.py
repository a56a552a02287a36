"""The Python member library (``groupcoord.client``, issue 43) against a real ``groupcoord dev``:
members converge to a balanced assignment with no partition owned twice (a checker reads
every callback), commit/fetch/describe as the member, a member paused past its session
timeout (SIGSTOP) is fenced and rejoins (``on_lost``, then a new assignment), close leaves.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from groupcoord.client import GroupError, GroupMember

from services.client import CoordinatorClient, RetryPolicy
from tests.support.client_side import NAME as STRIPES
from tests.support.client_side import StripesAssignor
from tests.support.member_events import Owners
from tests.support.offsets import ensure_topic
from tests.support.processes import ROOT, ServerProcess

FAST = (
    "consumer_group_heartbeat_interval_ms=200,consumer_group_min_heartbeat_interval_ms=100,"
    "consumer_group_session_timeout_ms=2000,consumer_group_min_session_timeout_ms=1000"
)
TOPIC, PARTITIONS = "orders", 6


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess.dev(tmp_path_factory.mktemp("member-lib"), "--set", FAST) as server:
        ensure_topic(server.grpc_address, TOPIC, PARTITIONS)
        yield server


async def until(predicate: Any, timeout: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def balanced(members: list[GroupMember]) -> bool:
    sizes = [len(m.assignment) for m in members]
    union = set().union(*(m.assignment for m in members))
    return len(union) == PARTITIONS == sum(sizes) and max(sizes) - min(sizes) <= 1


async def test_members_converge_commit_fetch_describe_and_leave(dev: ServerProcess) -> None:
    owners = Owners()
    members = [
        GroupMember(dev.grpc_address, "lib-g1", topics=[TOPIC], listener=owners.listener(f"m{i}"))
        for i in range(3)
    ]
    await members[0].start()
    await until(lambda: len(members[0].assignment) == PARTITIONS, what="the first member")
    for m in members[1:]:
        await m.start()
    await until(lambda: balanced(members), what="a balanced assignment of 3")
    assert not owners.violations
    # every member revoked before the others got its partitions: m0 gave up 4 of 6
    assert sum(len(p) for n, e, p in owners.events if n == "m0" and e == "revoked") == 4

    mine = next(iter(members[1].assignment))
    assert await members[1].commit({mine: 42}) == {mine: 0}
    assert await members[2].fetch([mine]) == {mine: 42}
    described = await members[0].describe()
    assert {m.member_id for m in described.members} == {m.member_id for m in members}
    assert described.group_state == "Stable"

    await members[2].close()  # revokes, leaves; the others take its partitions
    await until(lambda: balanced(members[:2]), what="a balanced assignment of 2")
    assert not owners.violations
    described = await members[0].describe()
    assert {m.member_id for m in described.members} == {members[0].member_id, members[1].member_id}
    for m in members[:2]:
        await m.close()
    assert not owners.owner  # everything revoked on close


async def test_a_pattern_subscription_and_a_refused_join(dev: ServerProcess) -> None:
    member = GroupMember(dev.grpc_address, "lib-g2", pattern="ord.*")
    async with member:
        await until(lambda: len(member.assignment) == PARTITIONS, what="the regex's topic")
    bad = GroupMember(dev.grpc_address, "lib-g3", pattern="(unclosed")
    with pytest.raises(GroupError) as info:
        await bad.start(timeout_s=10)
    assert info.value.code == 128  # INVALID_REGULAR_EXPRESSION
    await bad.close()


async def test_a_client_side_assignor_computes_the_target(dev: ServerProcess) -> None:
    """The member chosen by the coordinator computes the group's target with its own
    assignor (stripes: contiguous ranges in member-id order) and installs it."""
    owners = Owners()
    members = [
        GroupMember(
            dev.grpc_address,
            "lib-g5",
            topics=[TOPIC],
            listener=owners.listener(name),
            assignors=[StripesAssignor()],
            member_id=name,
        )
        for name in ("m-a", "m-b")
    ]
    for m in members:
        await m.start()
    await until(lambda: balanced(members), what="stripes of 3")
    assert sorted(tp.partition for tp in members[0].assignment) == [0, 1, 2]
    assert sorted(tp.partition for tp in members[1].assignment) == [3, 4, 5]
    assert (await members[0].describe()).assignor_name == STRIPES
    assert sum(m.computations for m in members) >= 1
    assert not owners.violations
    for m in members:
        await m.close()


async def test_a_static_member_restarts_into_its_partitions(dev: ServerProcess) -> None:
    """A static member (instance id) leaves with epoch -2: the coordinator keeps its
    assignment for the session timeout, and the member restarted with the same instance id
    gets it back -- the other member loses nothing meanwhile."""
    owners = Owners()

    def static(name: str) -> GroupMember:
        return GroupMember(
            dev.grpc_address,
            "lib-g6",
            topics=[TOPIC],
            listener=owners.listener(name),
            instance_id="instance-1",
        )

    first = static("s1")
    other = GroupMember(dev.grpc_address, "lib-g6", topics=[TOPIC], listener=owners.listener("d"))
    await first.start()
    await until(lambda: len(first.assignment) == PARTITIONS, what="the static member's 6")
    await other.start()
    await until(lambda: balanced([first, other]), what="3 each")
    kept = first.assignment
    await first.close()  # epoch -2
    second = static("s2")
    await second.start()
    await until(lambda: second.assignment == kept, what="the same 3 back")
    assert not [e for e in owners.events if e[0] == "d" and e[1] != "assigned"]
    assert not owners.violations
    for m in (second, other):
        await m.close()


async def test_members_sharing_one_client_and_a_member_that_dies(dev: ServerProcess) -> None:
    """Two members on one shared client (as the load tester runs thousands): the hook sees
    their heartbeats; one aborts (the process died: no callback, no leave) and the other gets
    its partitions once the session timed out; the shared client was not closed."""
    owners = Owners()
    client = CoordinatorClient(dev.grpc_address)
    beats: list[int] = []
    members = [
        GroupMember(
            "unused:1",
            "lib-g7",
            topics=[TOPIC],
            listener=owners.listener(name),
            client=client,
            backoff=RetryPolicy(initial_backoff_s=0.05, max_backoff_s=1.0),
        )
        for name in ("dies", "lives")
    ]
    members[1].on_heartbeat = lambda response: beats.append(response.member_epoch)
    for m in members:
        await m.start()
    await until(lambda: balanced(members), what="3 each")
    died = members[0].assignment
    before = len(owners.events)
    await members[0].abort()
    owners.release("dies", died)  # the process is gone: it owns nothing any more
    await until(lambda: len(members[1].assignment) == PARTITIONS, 15, "the survivor's 6")
    assert [e for e in owners.events[before:] if e[0] == "dies"] == []  # no callback
    assert not owners.violations
    assert len(beats) > 3 and beats == sorted(beats)  # epochs only move forward
    await members[1].close()
    assert (await client.consumer_group_describe("lib-g7")).members == []
    await client.close()
    with pytest.raises(ValueError, match="topic_names"):
        GroupMember("x:1", "g", topics=["t"], client=object())  # type: ignore[arg-type]


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="either topics or pattern"):
        GroupMember("localhost:1", "g")
    with pytest.raises(ValueError, match="group id"):
        GroupMember("localhost:1", "", topics=["t"])


class ExampleMember:
    """``python -m groupcoord.client`` in a child process; its JSON lines collected."""

    def __init__(self, bootstrap: str, group: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "groupcoord.client",
                "--bootstrap",
                bootstrap,
                "--group",
                group,
                *args,
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.events: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def owned(self) -> set[tuple[str, int]]:
        owned: set[tuple[str, int]] = set()
        for e in list(self.events):
            parts = {tuple(p) for p in e["partitions"]}
            if e["event"] == "assigned":
                owned |= parts
            elif e["event"] in ("revoked", "lost"):
                owned -= parts
        return owned

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(20)


async def test_a_paused_member_is_fenced_loses_its_partitions_and_rejoins(
    dev: ServerProcess,
) -> None:
    a = ExampleMember(dev.grpc_address, "lib-g4", "--topics", TOPIC)
    b = ExampleMember(dev.grpc_address, "lib-g4", "--topics", TOPIC)
    try:
        await until(lambda: len(a.owned()) == len(b.owned()) == 3, what="3 partitions each")
        before = len(b.events)
        os.kill(b.proc.pid, signal.SIGSTOP)  # past the 2 s session timeout
        await until(lambda: len(a.owned()) == PARTITIONS, timeout=15, what="a takes all 6")
        os.kill(b.proc.pid, signal.SIGCONT)
        await until(
            lambda: any(e["event"] == "lost" for e in b.events), timeout=15, what="b's on_lost"
        )
        await until(lambda: len(a.owned()) == len(b.owned()) == 3, what="3 each again")
        after = b.events[before:]
        lost = next(e for e in after if e["event"] == "lost")
        assert len(lost["partitions"]) == 3  # what it owned when it was fenced, not revoked
        assert not any(e["event"] == "revoked" for e in after)
        # rejoined with the same member id, at a new epoch
        ids = {e["member_id"] for e in b.events}
        assert len(ids) == 1
        assert a.owned().isdisjoint(b.owned())
    finally:
        for m in (a, b):
            if m.proc.poll() is None:
                os.kill(m.proc.pid, signal.SIGCONT)
            m.close()
    assert [e["event"] for e in a.events][-1] == "left"
    assert a.proc.returncode == 0 and b.proc.returncode == 0


async def test_heartbeats_go_on_while_a_revocation_takes_longer_than_the_session(
    dev: ServerProcess,
) -> None:
    """The callbacks run beside the heartbeats (as in Kafka's consumer): a revocation that
    takes 3 s with a 2 s session timeout does not get the member fenced, and the partitions it
    gives up reach the other member only after the callback returned."""
    a = ExampleMember(dev.grpc_address, "lib-g7", "--topics", TOPIC, "--revoke-delay-ms", "3000")
    b: ExampleMember | None = None
    try:
        await until(lambda: len(a.owned()) == PARTITIONS, what="a's 6")
        b = ExampleMember(dev.grpc_address, "lib-g7", "--topics", TOPIC)
        joined = b
        await until(lambda: len(a.owned()) == len(joined.owned()) == 3, timeout=30, what="3 each")
        assert not [e for e in a.events if e["event"] == "lost"]
        revoked = next(e for e in a.events if e["event"] == "revoked")
        assigned = next(e for e in b.events if e["event"] == "assigned")
        assert revoked["ms"] <= assigned["ms"]
        assert a.owned().isdisjoint(b.owned())
    finally:
        for m in (a, b):
            if m is not None:
                m.close()
