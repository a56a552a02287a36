"""The Go member library (``clients/go/member``) against a real ``groupcoord dev``: members
run as processes of its example (``cmd/member-example``, built at test time, cached), which
prints every callback as a JSON line. An invariant checker reads every member's events: no
partition owned by two members at once, as their callbacks say. Scenarios: three members
converge to a balanced, disjoint assignment that ConsumerGroupDescribe confirms; a member
paused (SIGSTOP) past the session timeout is fenced and, resumed, calls on_lost and rejoins
with the same member id and a new assignment; commit/fetch as the member; a member that
closes leaves the group (describe no longer lists it); a revocation blocked past the session
timeout does not get the member fenced (the callbacks run beside the heartbeats), one blocked
past the rebalance timeout does, and finishes before on_lost. Those two slow members run a
build with the race detector; a data race it reports fails the test that closes it.

No skip: CI has Go, so a missing toolchain is a failure here."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from proto.groupcoord.v1 import (
    catalog_pb2,
    catalog_pb2_grpc,
    consumer_group_pb2,
    coordinator_pb2_grpc,
    groups_pb2,
)
from tests.integration.multishard.cluster import Cluster
from tests.interop import generated_clients
from tests.interop.generated_clients import ToolMissing
from tests.support.certs import Ca
from tests.support.processes import ROOT, ServerProcess
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.timeout(300)]

SESSION_MS = 2000
FAST = (
    "consumer_group_heartbeat_interval_ms=300,consumer_group_min_heartbeat_interval_ms=100,"
    f"consumer_group_session_timeout_ms={SESSION_MS},consumer_group_min_session_timeout_ms=1000"
)
PARTITIONS = 6


@pytest.fixture(scope="module")
def member_example() -> list[str]:
    try:
        return generated_clients.go_member_example()
    except ToolMissing as ex:
        pytest.fail(str(ex))


@pytest.fixture(scope="module")
def member_example_race() -> list[str]:
    """The example built with the race detector: for the members whose callbacks block while
    the heartbeats go on (the reconciliation goroutine beside the heartbeat goroutine)."""
    try:
        return generated_clients.go_member_example(race=True)
    except ToolMissing as ex:
        pytest.fail(str(ex))


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess.dev(tmp_path_factory.mktemp("go-member"), "--set", FAST) as server:
        yield server


def create_topic(address: str, name: str, partitions: int) -> None:
    with grpc.insecure_channel(address) as ch:
        resp = catalog_pb2_grpc.TopicCatalogStub(ch).CreateTopics(
            catalog_pb2.CreateTopicsRequest(
                topics=[catalog_pb2.CreatableTopic(name=name, num_partitions=partitions)]
            ),
            timeout=10,
        )
    assert resp.topics[0].error_code == 0, resp


def describe(address: str, group: str) -> Any:
    with grpc.insecure_channel(address) as ch:
        resp = coordinator_pb2_grpc.GroupCoordinatorStub(ch).ConsumerGroupDescribe(
            consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=[group]), timeout=10
        )
    return resp.groups[0]


class GoMember:
    """One member-example process; its JSON lines are collected by a reader thread."""

    def __init__(self, cmd: list[str], bootstrap: str, group: str, topic: str, *flags: str) -> None:
        self.proc = subprocess.Popen(
            # (--name: Go's flag package takes it as -name; Python's argparse needs it)
            [*cmd, "--bootstrap", bootstrap, "--group", group, "--topics", topic, *flags],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: list[dict[str, Any]] = []
        self._new: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            self.events.append(event)
            self._new.put(event)

    @property
    def member_id(self) -> str:
        return self.wait_for(lambda e: "member_id" in e)["member_id"]

    def owned(self) -> set[tuple[str, int]]:
        """The partitions the member owns, as its callbacks said."""
        owned: set[tuple[str, int]] = set()
        for e in list(self.events):
            parts = {(p[0], p[1]) for p in e["partitions"]}
            if e["event"] == "assigned":
                owned |= parts
            elif e["event"] in ("revoked", "lost"):
                owned -= parts
        return owned

    def wait_for(self, pred: Any, timeout: float = 20.0, after: int = 0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in list(self.events)[after:]:
                if pred(e):
                    return e
            time.sleep(0.05)
        raise AssertionError(f"no such event in {timeout} s: {self.events[after:]}")

    def command(self, cmd: str) -> dict[str, Any]:
        n = len(self.events)
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self.wait_for(lambda e: e["event"] == cmd, after=n)

    def close(self, timeout: float = 20.0) -> int:
        """stdin EOF: the member leaves and exits (a data race reported by a build with the
        race detector fails here)."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        code = self.proc.wait(timeout)
        self._reader.join(5)
        assert self.proc.stderr is not None
        stderr = self.proc.stderr.read()
        assert "DATA RACE" not in stderr, stderr
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def check_disjoint(
    members: list[GoMember], excused: dict[str, tuple[float, float]] | None = None
) -> int:
    """Replays every member's callbacks in time order (at one millisecond, releases before
    acquisitions: their order across processes within a millisecond is unknown) and fails
    when a partition is assigned to a member while another owns it. ``excused``: member id ->
    (from ms, to ms) when that member could not heartbeat (paused by SIGSTOP, or blocked in
    a callback) past its session: the coordinator fenced it and moved its partitions while
    it still held them; its late on_revoked and its on_lost end its ownership.
    Returns the number of callbacks checked."""
    excused = excused or {}
    order = {"revoked": 0, "lost": 0, "assigned": 1}
    events = sorted(
        (e for m in members for e in m.events if e["event"] in order),
        key=lambda e: (e["ms"], order[e["event"]]),
    )
    owner: dict[tuple[str, int], str] = {}
    for e in events:
        mid = e["member_id"]
        for p in e["partitions"]:
            tp = (p[0], p[1])
            if e["event"] == "assigned":
                prev = owner.get(tp)
                if prev is not None and prev != mid:
                    start, end = excused.get(prev, (0.0, 0.0))
                    assert start <= e["ms"] <= end, f"{tp} assigned to {mid} while {prev} owns it"
                assert prev != mid, f"{tp} assigned twice to {mid}"
                owner[tp] = mid
            elif owner.get(tp) == mid:
                del owner[tp]
            else:  # releasing what it no longer owns: only a fenced (excused) member does
                start, end = excused.get(mid, (0.0, -1.0))
                assert e["event"] == "lost" or start <= e["ms"] <= end, (
                    f"{mid} revoked {tp} it did not own: {e}"
                )
    return len(events)


def wait_balanced(members: list[GoMember], total: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        owned = [m.owned() for m in members]
        sizes = sorted(len(o) for o in owned)
        union = set().union(*owned)
        if len(union) == total and sum(sizes) == total and sizes[-1] - sizes[0] <= 1:
            return
        time.sleep(0.1)
    raise AssertionError(f"not balanced in {timeout} s: {[sorted(m.owned()) for m in members]}")


def test_go_members_converge_survive_fencing_and_leave(
    member_example: list[str], dev: ServerProcess
) -> None:
    address, group, topic = dev.grpc_address, "go-member-g1", "go-member-t1"
    create_topic(address, topic, PARTITIONS)
    members = [GoMember(member_example, address, group, topic) for _ in range(3)]
    try:
        wait_balanced(members, PARTITIONS)
        ids = [m.member_id for m in members]
        # the shared format: joined first, partitions as [topic, partition]
        assert [m.events[0]["event"] for m in members] == ["joined"] * 3
        assert [m.events[1]["event"] for m in members] == ["assigned"] * 3
        assert all(
            isinstance(p, list) and len(p) == 2 for m in members for p in m.events[1]["partitions"]
        )
        assert len(set(ids)) == 3 and all(len(i) == 22 for i in ids), ids
        # the coordinator's view equals the callbacks' (the reconciliation is acknowledged)
        deadline = time.monotonic() + 10
        while True:
            g = describe(address, group)
            described = {
                m.member_id: {(a.topic_name, p) for a in m.assignment for p in a.partitions}
                for m in g.members
            }
            if described == {m.member_id: m.owned() for m in members} or (
                time.monotonic() > deadline
            ):
                break
            time.sleep(0.1)
        assert described == {m.member_id: m.owned() for m in members}, described
        assert g.group_state == "Stable"

        # commit and fetch as the member (its id and epoch): offsets 100 + partition
        first = members[0]
        commit = first.command("commit")
        assert commit.get("error") is None and not commit.get("failed"), commit
        assert len(commit["partitions"]) == 2
        fetched = first.command("fetch")
        assert fetched.get("error") is None, fetched
        for p in commit["partitions"]:
            assert fetched["offsets"][f"{p[0]}-{p[1]}"] == 100 + p[1]
        desc = first.command("describe")
        assert {m["member_id"] for m in desc["group"]["members"]} == set(ids), desc

        # fencing: paused past the session timeout, the member is fenced and its partitions
        # move; resumed, it calls on_lost (not on_revoked) and rejoins with the same id
        victim = members[0]
        lost_before = victim.owned()
        n = len(victim.events)
        paused_ms = time.time() * 1000
        os.kill(victim.proc.pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + SESSION_MS / 1000 + 10
            while {m.member_id for m in describe(address, group).members} != set(ids[1:]):
                assert time.monotonic() < deadline, "the paused member was not fenced"
                time.sleep(0.2)
            wait_balanced(members[1:], PARTITIONS)  # the other two took its partitions
        finally:
            os.kill(victim.proc.pid, signal.SIGCONT)
        lost = victim.wait_for(lambda e: e["event"] == "lost", after=n)
        assert {(p[0], p[1]) for p in lost["partitions"]} == lost_before
        assert not [e for e in victim.events[n:] if e["event"] == "revoked"], victim.events[n:]
        rejoined = victim.wait_for(
            lambda e: e["event"] == "assigned" and e["partitions"], after=n, timeout=30
        )
        assert rejoined["member_id"] == ids[0] and rejoined["epoch"] > lost["epoch"]
        wait_balanced(members, PARTITIONS)
        assert ids[0] in {m.member_id for m in describe(address, group).members}

        # close: on_revoked(owned), leave; describe no longer lists it
        leaver = members[2]
        owned = leaver.owned()
        n = len(leaver.events)
        assert leaver.close() == 0, leaver.proc.stderr.read() if leaver.proc.stderr else ""
        tail = [e["event"] for e in leaver.events[n:]]
        assert tail == ["revoked", "left"], leaver.events[n:]
        assert {(p[0], p[1]) for p in leaver.events[n]["partitions"]} == owned
        assert "error" not in leaver.events[-1]
        assert ids[2] not in {m.member_id for m in describe(address, group).members}
        wait_balanced(members[:2], PARTITIONS)

        for m in members[:2]:
            assert m.close() == 0
        assert not describe(address, group).members
        resumed_ms = lost["ms"]
        checked = check_disjoint(members, {ids[0]: (paused_ms, resumed_ms)})
        assert checked >= 3 + 2 + 2  # initial assignments, the fencing's moves, the leave
        errors = [e for m in members for e in m.events if e["event"] == "error"]
        assert not errors, errors
    finally:
        for m in members:
            if m.proc.poll() is None:
                os.kill(m.proc.pid, signal.SIGCONT)
            m.kill()


def test_go_member_keeps_heartbeating_while_its_revocation_blocks(
    member_example: list[str], member_example_race: list[str], dev: ServerProcess
) -> None:
    # the member's on_revoked blocks past the session timeout (2 s) but within the rebalance
    # timeout (30 s): the callbacks run beside the heartbeats, so the member is not fenced;
    # the partitions it revokes move to the other member only after the callback returned
    address, group, topic = dev.grpc_address, "go-member-slow", "go-member-t3"
    create_topic(address, topic, PARTITIONS)
    delay_s = SESSION_MS / 1000 + 2
    slow = GoMember(member_example_race, address, group, topic, "-revoke-delay", f"{delay_s}s")
    other: GoMember | None = None
    try:
        wait_balanced([slow], PARTITIONS)
        joined_ms = time.time() * 1000
        other = GoMember(member_example, address, group, topic)
        # past the session timeout, still blocked: the coordinator still has both members,
        # the slow one at a live epoch, and nothing has moved to the other yet
        time.sleep(SESSION_MS / 1000 + 1)
        assert not [e for e in slow.events if e["event"] == "revoked"], slow.events
        g = describe(address, group)
        epochs = {m.member_id: m.member_epoch for m in g.members}
        assert set(epochs) == {slow.member_id, other.member_id}, g
        assert epochs[slow.member_id] > 0, g
        assert not other.owned(), other.events
        revoked = slow.wait_for(lambda e: e["event"] == "revoked", timeout=delay_s + 10)
        assert revoked["ms"] - joined_ms >= delay_s * 1000 - 100  # it really blocked
        wait_balanced([slow, other], PARTITIONS, timeout=30)
        kept = slow.owned()
        assert {(p[0], p[1]) for p in revoked["partitions"]} == other.owned()
        assert kept | other.owned() == {(topic, p) for p in range(PARTITIONS)}
        assert not [e for e in slow.events if e["event"] in ("lost", "error")], slow.events
        first = [e for e in other.events if e["event"] == "assigned" and e["partitions"]][0]
        assert first["ms"] >= revoked["ms"], (first, revoked)  # released, then assigned
        assert slow.close() == 0 and other.close() == 0
        check_disjoint([slow, other])  # no excuse: nothing was owned twice
    finally:
        for m in (slow, other):
            if m is not None:
                m.kill()


def test_go_member_fenced_while_its_revocation_blocks_finishes_it_then_loses_the_rest(
    member_example: list[str], member_example_race: list[str], dev: ServerProcess
) -> None:
    # the revocation outlasts the member's rebalance timeout (2 s; the callback blocks 4 s):
    # the coordinator removes it meanwhile although it heartbeats. The library lets the
    # callback finish (its revoked line), then, on the next heartbeat's fencing, calls
    # on_lost for the rest and rejoins at epoch 0 with the same member id
    address, group, topic = dev.grpc_address, "go-member-slow-fenced", "go-member-t9"
    create_topic(address, topic, PARTITIONS)
    delay_s = 4.0
    flags = ["-revoke-delay", f"{delay_s}s", "-rebalance-timeout", "2s"]
    slow = GoMember(member_example_race, address, group, topic, *flags)
    other: GoMember | None = None
    try:
        wait_balanced([slow], PARTITIONS)
        mid = slow.member_id
        joined_ms = time.time() * 1000
        other = GoMember(member_example, address, group, topic)
        revoked = slow.wait_for(lambda e: e["event"] == "revoked", timeout=delay_s + 10)
        lost = slow.wait_for(lambda e: e["event"] == "lost", timeout=10)
        assert revoked["ms"] - joined_ms >= delay_s * 1000 - 100  # it really blocked
        kept = {(p[0], p[1]) for p in revoked["partitions"]}
        assert {(p[0], p[1]) for p in lost["partitions"]} == (
            {(topic, p) for p in range(PARTITIONS)} - kept
        )
        assert lost["ms"] >= revoked["ms"]  # the callback finished first
        wait_balanced([slow, other], PARTITIONS, timeout=30)
        g = describe(address, group)
        assert {m.member_id for m in g.members} == {mid, other.member_id}
        assert slow.close() == 0 and other.close() == 0
        # slow's ownership overlapped other's from its removal until its on_lost: excused
        check_disjoint([slow, other], {mid: (joined_ms, lost["ms"])})
    finally:
        for m in (slow, other):
            if m is not None:
                m.kill()


def test_go_static_members_conflict_then_take_over(
    member_example: list[str], dev: ServerProcess
) -> None:
    # two processes with one instance id: the second gets UNRELEASED_INSTANCE_ID (an error
    # event) and retries with backoff; when the first leaves (epoch -2, a static leave) the
    # second takes the instance over and gets the partitions
    address, group, topic = dev.grpc_address, "go-member-static", "go-member-t4"
    create_topic(address, topic, PARTITIONS)
    first = GoMember(member_example, address, group, topic, "-instance-id", "i1")
    second: GoMember | None = None
    try:
        wait_balanced([first], PARTITIONS)
        second = GoMember(member_example, address, group, topic, "-instance-id", "i1")
        err = second.wait_for(lambda e: e["event"] == "error")
        assert "UNRELEASED_INSTANCE_ID (111)" in err["error"], err
        g = describe(address, group)
        assert [(m.member_id, m.instance_id) for m in g.members] == [(first.member_id, "i1")]
        assert first.close() == 0
        assert [e["event"] for e in first.events[-2:]] == ["revoked", "left"]
        second.wait_for(lambda e: e["event"] == "assigned" and e["partitions"], timeout=30)
        wait_balanced([second], PARTITIONS)
        g = describe(address, group)
        assert [(m.member_id, m.instance_id) for m in g.members] == [(second.member_id, "i1")]
        assert second.close() == 0
        check_disjoint([first, second])
    finally:
        for m in (first, second):
            if m is not None:
                m.kill()


def test_go_and_python_members_share_a_group(member_example: list[str], dev: ServerProcess) -> None:
    # two Go members and one of the Python library's example (python -m groupcoord.client)
    # in one group: their JSON lines have one format, so the one checker reads them all
    address, group, topic = dev.grpc_address, "go-member-mixed", "go-member-t8"
    create_topic(address, topic, PARTITIONS)
    python = [sys.executable, "-m", "groupcoord.client"]
    members = [
        GoMember(member_example, address, group, topic),
        GoMember(python, address, group, topic),
        GoMember(member_example, address, group, topic),
    ]
    try:
        wait_balanced(members, PARTITIONS)
        g = describe(address, group)
        assert {m.member_id for m in g.members} == {m.member_id for m in members}
        # the Python member leaves: the Go members take its partitions
        assert members[1].close() == 0
        assert members[1].events[-1]["event"] == "left", members[1].events[-3:]
        wait_balanced([members[0], members[2]], PARTITIONS)
        for m in (members[0], members[2]):
            assert m.close() == 0
        assert not describe(address, group).members
        assert check_disjoint(members) >= 3 + 1 + 2
    finally:
        for m in members:
            m.kill()


def cpu_seconds(pid: int) -> float:
    """user + system CPU time of a process (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_go_member_waits_out_its_coordinator_down_without_spinning(
    member_example: list[str], tmp_path: Path
) -> None:
    # the dev process is killed (kill -9) and started again 3 s later on the same port and
    # data: meanwhile the member's retries back off (its CPU time stays small: no busy
    # loop); then it finds the coordinator again and owns every partition again
    group, topic = "go-member-down", "go-member-t7"
    dev = ServerProcess.dev(tmp_path / "dev", "--set", FAST)
    restarted: ServerProcess | None = None
    m: GoMember | None = None
    try:
        create_topic(dev.grpc_address, topic, PARTITIONS)
        m = GoMember(member_example, dev.grpc_address, group, topic)
        wait_balanced([m], PARTITIONS)
        dev.kill()
        cpu_before, down_s = cpu_seconds(m.proc.pid), 3.0
        time.sleep(down_s)
        spent = cpu_seconds(m.proc.pid) - cpu_before
        assert spent < 0.1 * down_s, f"{spent:.2f} s of CPU in {down_s} s: a busy loop"
        n = len(m.events)
        args = ["dev", "--grpc-port", str(dev.grpc_port), "--kafka-port", "0", "--data-dir"]
        restarted = ServerProcess(
            [*args, str(tmp_path / "dev" / "data"), "--set", FAST], tmp_path / "restarted.log"
        )
        # back in the group: kept what it owned (the group reloaded from the data directory)
        # or, fenced meanwhile, lost it and was assigned again
        deadline = time.monotonic() + 30
        while m.owned() != {(topic, p) for p in range(PARTITIONS)} or m.member_id not in {
            x.member_id for x in describe(restarted.grpc_address, group).members
        }:
            assert time.monotonic() < deadline, m.events[n:]
            time.sleep(0.2)
        # it talks to the new process: a commit as the member, and the leave
        commit = m.command("commit")
        assert commit.get("error") is None and len(commit["partitions"]) == PARTITIONS, commit
        assert m.close() == 0, m.events[n:]
        assert not describe(restarted.grpc_address, group).members
        check_disjoint([m])
    finally:
        if m is not None:
            m.kill()
        for server in (dev, restarted):
            if server is not None and server.proc.poll() is None:
                server.kill()


def test_go_members_with_a_client_side_assignor(
    member_example: list[str], dev: ServerProcess
) -> None:
    # every member declares the example's round-robin client-side assignor: the coordinator
    # chooses one to compute (PrepareAssignment, its Go assignor, InstallAssignment) and the
    # target is round-robin by member id, which the server's uniform assignor does not give
    address, group, topic = dev.grpc_address, "go-member-client-side", "go-member-t6"
    create_topic(address, topic, PARTITIONS)
    members = [
        GoMember(member_example, address, group, topic, "-client-assignor", "go-rr")
        for _ in range(3)
    ]
    try:
        ranked = sorted(members, key=lambda m: m.member_id)
        want = [{(topic, p) for p in range(PARTITIONS) if p % 3 == k} for k in range(3)]
        deadline = time.monotonic() + 30
        while [m.owned() for m in ranked] != want:
            assert time.monotonic() < deadline, [sorted(m.owned()) for m in ranked]
            time.sleep(0.1)
        assert describe(address, group).assignor_name == "go-rr"
        for m in members:
            assert m.close() == 0
        check_disjoint(members)
        # (an install refused because another member joined while the chosen one computed
        # -- "computed for group epoch N; the group is at epoch N+1" -- is the protocol
        # working: the next heartbeat computes the new epoch's target)
        errors = [
            e
            for m in members
            for e in m.events
            if e["event"] == "error" and "the group is at epoch" not in e.get("error", "")
        ]
        assert not errors, json.dumps(errors)
    finally:
        for m in members:
            m.kill()


def test_go_member_over_mutual_tls(member_example: list[str], tmp_path: Path) -> None:
    # a dev serving gRPC over TLS with client certificates required: the member verifies the
    # server against the CA and presents its own certificate (Config.TLS)
    ca = Ca()
    cafile = ca.write(tmp_path)
    server, client = ca.issue(tmp_path, "server"), ca.issue(tmp_path, "client")
    tls = ["--tls-cafile", str(cafile), "--tls-certfile", str(server.cert)]
    tls += ["--tls-keyfile", str(server.key), "--tls-client-auth", "required"]
    group, topic = "go-member-tls", "go-member-t5"
    with ServerProcess.dev(tmp_path / "dev", "--set", FAST, *tls) as dev:
        creds = grpc.ssl_channel_credentials(
            ca.pem, client.key.read_bytes(), client.cert.read_bytes()
        )
        with grpc.secure_channel(dev.grpc_address, creds) as ch:
            resp = catalog_pb2_grpc.TopicCatalogStub(ch).CreateTopics(
                catalog_pb2.CreateTopicsRequest(
                    topics=[catalog_pb2.CreatableTopic(name=topic, num_partitions=PARTITIONS)]
                ),
                timeout=10,
            )
            assert resp.topics[0].error_code == 0, resp
        flags = ["-tls-ca", str(cafile), "-tls-cert", str(client.cert), "-tls-key", str(client.key)]
        m = GoMember(member_example, dev.grpc_address, group, topic, *flags)
        try:
            wait_balanced([m], PARTITIONS)
            desc = m.command("describe")
            assert [x["member_id"] for x in desc["group"]["members"]] == [m.member_id]
            assert m.close() == 0
            assert [e["event"] for e in m.events[-2:]] == ["revoked", "left"]
        finally:
            m.kill()


def find_coordinator(address: str, group: str) -> str:
    with grpc.insecure_channel(address) as ch:
        resp = coordinator_pb2_grpc.GroupCoordinatorStub(ch).FindCoordinator(
            groups_pb2.FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), timeout=10
        )
    c = resp.coordinators[0]
    assert c.error_code == 0, c
    return f"{c.host}:{c.port}"


def test_go_members_survive_a_kill_9_of_the_groups_shard(
    member_example: list[str], redis_server: RedisServer, tmp_path: Path
) -> None:
    # 3 shards on a real Redis; the members bootstrap from all three and the group's shard is
    # killed (kill -9): its partitions' leases move, the members find the new coordinator
    # (FindCoordinator again) and go on with their epochs, nothing owned twice
    (tmp_path / "shards").mkdir()
    cluster = Cluster(
        tmp_path / "shards",
        redis_server,
        num_partitions=12,
        prefix="gomember",
        config=FAST.replace(f"session_timeout_ms={SESSION_MS}", "session_timeout_ms=10000"),
    )
    group, topic = "go-member-kill", "go-member-t2"
    members: list[GoMember] = []
    try:
        for n in range(3):
            cluster.start(n)
        asyncio.run(cluster.wait_settled())
        bootstrap = ",".join(cluster.addresses())
        create_topic(cluster.addresses()[0], topic, PARTITIONS)
        members = [GoMember(member_example, bootstrap, group, topic) for _ in range(3)]
        wait_balanced(members, PARTITIONS)
        ids = {m.member_id for m in members}
        owner = find_coordinator(cluster.addresses()[0], group)
        victim = next(n for n, s in cluster.shards.items() if s.grpc_address == owner)
        before = [len(m.events) for m in members]
        proc = cluster.shards[victim].proc
        cluster.kill(victim)
        assert proc.returncode == -signal.SIGKILL
        survivor = cluster.addresses()[0]
        deadline = time.monotonic() + 30
        while True:  # a surviving shard took the group over, with the three members in it
            try:
                moved = find_coordinator(survivor, group)
                if moved != owner and {m.member_id for m in describe(moved, group).members} == ids:
                    break
            except (grpc.RpcError, AssertionError):
                pass
            assert time.monotonic() < deadline, "the group did not move to a surviving shard"
            time.sleep(0.2)
        # the members follow it: a commit re-routed to the new owner, with the member's epoch
        commit = members[0].command("commit")
        assert commit.get("error") is None and not commit.get("failed"), commit
        # and rebalance through it: a fourth member joins, the three revoke to make room
        members.append(GoMember(member_example, bootstrap, group, topic))
        wait_balanced(members, PARTITIONS)
        assert all(m.owned() for m in members)
        g = describe(moved, group)
        assert all(m.member_epoch > 0 for m in g.members), g
        for m, n in zip(members, before, strict=False):
            assert not [e for e in m.events[n:] if e["event"] == "lost"], m.events[n:]
        for m in members:
            assert m.close() == 0, m.events[-3:]
        assert not describe(moved, group).members
        check_disjoint(members)
    finally:
        for m in members:
            m.kill()
        cluster.close()


def test_invariant_checker_catches_a_partition_owned_twice() -> None:
    # the checker is what the scenario relies on: two members' callbacks overlapping fail it
    class Fake:
        def __init__(self, events: list[dict[str, Any]]) -> None:
            self.events = events

    def ev(kind: str, mid: str, ms: int, *parts: int) -> dict[str, Any]:
        return {
            "event": kind,
            "member_id": mid,
            "ms": ms,
            "partitions": [["t", p] for p in parts],
        }

    a = Fake([ev("assigned", "a", 1, 0, 1), ev("revoked", "a", 5, 1)])
    b = Fake([ev("assigned", "b", 4, 1)])  # before a revoked it
    with pytest.raises(AssertionError, match="while a owns it"):
        check_disjoint([a, b])  # type: ignore[list-item]
    b.events[0]["ms"] = 5  # the same millisecond: the release counts first
    assert check_disjoint([a, b]) == 3  # type: ignore[list-item]
    b.events[0]["ms"] = 4  # a was paused and fenced: its partition moved, on_lost follows
    a.events[1]["event"] = "lost"
    assert check_disjoint([a, b], {"a": (2, 6)}) == 3  # type: ignore[list-item]


def test_go_member_unit_tests() -> None:
    # clients/go/member/member_test.go: reconciliation sets, backoff bounds, member ids,
    # config checks, retries against an address with nothing listening
    try:
        generated_clients.go_member_test()
    except ToolMissing as ex:
        pytest.fail(str(ex))
