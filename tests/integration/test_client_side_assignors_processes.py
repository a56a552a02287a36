"""Process test of KIP-848 client-side assignors: a real groupcoord process, three real member
processes using the Python helper with a custom assignor (tests.support.client_side). They
converge; the member chosen to compute is killed (SIGKILL) in the middle of its computation,
and the two others still converge -- another member is chosen once the coordinator notices."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import grpc
import pytest
from groupcoord.v1 import (
    catalog_pb2,
    catalog_pb2_grpc,
    consumer_group_pb2,
    coordinator_pb2_grpc,
)

from tests.support.client_side import NAME
from tests.support.processes import ROOT, ServerProcess, wait_until

pytestmark = pytest.mark.slow

GROUP = "stripes-processes"
PARTITIONS = 6


class MemberProcess:
    def __init__(self, bootstrap: str, member_id: str, delay: float) -> None:
        self.member_id = member_id
        self.events: list[dict[str, Any]] = []
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.client_side",
                "--bootstrap",
                bootstrap,
                "--group",
                GROUP,
                "--topic",
                "orders",
                "--member-id",
                member_id,
                "--delay",
                str(delay),
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def computing(self) -> bool:
        return any(e["event"] == "computing" for e in self.events)

    def last_state(self) -> dict[str, Any] | None:
        states = [e for e in self.events if e["event"] == "state"]
        return states[-1] if states else None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # EOF: leave the group and exit
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


async def _grpc(address: str, topics: bool = False) -> Any:
    async with grpc.aio.insecure_channel(address) as channel:
        if topics:
            r = await catalog_pb2_grpc.TopicCatalogStub(channel).CreateTopics(
                catalog_pb2.CreateTopicsRequest(
                    topics=[catalog_pb2.CreatableTopic(name="orders", num_partitions=PARTITIONS)]
                )
            )
            assert r.topics[0].error_code == 0, r
            return r
        r = await coordinator_pb2_grpc.GroupCoordinatorStub(channel).ConsumerGroupDescribe(
            consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=[GROUP])
        )
        return r.groups[0]


def _converged(server: ServerProcess, members: list[MemberProcess]) -> bool:
    group = asyncio.run(_grpc(server.grpc_address))
    if group.error_code or group.group_state != "Stable":
        return False
    if sorted(m.member_id for m in group.members) != sorted(m.member_id for m in members):
        return False
    owned: list[int] = []
    for m in members:
        state = m.last_state()
        if state is None or state["epoch"] != group.group_epoch:
            return False
        owned += [p for ps in state["owned"].values() for p in ps]
    return sorted(owned) == list(range(PARTITIONS))


def test_helper_members_converge_and_survive_the_chosen_member_dying(tmp_path: Path) -> None:
    server = ServerProcess.dev(
        tmp_path,
        "--num-partitions",
        "2",
        "--set",
        "consumer_group_min_heartbeat_interval_ms=100,consumer_group_heartbeat_interval_ms=200,"
        "consumer_group_min_session_timeout_ms=1000,consumer_group_session_timeout_ms=2000,"
        "consumer_group_client_assignment_timeout_ms=4000",
    )
    members: list[MemberProcess] = []
    try:
        asyncio.run(_grpc(server.grpc_address, topics=True))
        # 1. three members converge; computing takes 0.3 s
        members = [MemberProcess(server.grpc_address, f"m{i}", 0.3) for i in range(3)]
        wait_until(lambda: _converged(server, members), timeout=60, interval=0.2)
        group = asyncio.run(_grpc(server.grpc_address))
        assert group.assignor_name == NAME
        stripes = sorted(
            sorted(p for ps in m.last_state()["owned"].values() for p in ps)  # type: ignore[index]
            for m in members
        )
        assert stripes == [[0, 1], [2, 3], [4, 5]]
        assert all(m.last_state()["metadata"] == [1, "2"] for m in members)  # type: ignore[index]

        # 2. a fourth member joins with a slow assignor... and every member is slow now: the
        # one chosen is killed as soon as it starts computing
        slow = MemberProcess(server.grpc_address, "m3", 30.0)
        members.append(slow)
        for m in members:
            m.events.clear()
        wait_until(lambda: any(m.computing() for m in members), timeout=30, interval=0.02)
        (victim,) = [m for m in members if m.computing()]
        victim.kill()
        members.remove(victim)
        # the survivors converge without it (another member is chosen: its session ends, or
        # its deadline passes); a slow chosen survivor misses its deadline and is replaced
        if slow is not victim:
            slow.kill()
            members.remove(slow)
        wait_until(lambda: _converged(server, members), timeout=90, interval=0.2)
        owned = [p for m in members for ps in m.last_state()["owned"].values() for p in ps]  # type: ignore[index]
        assert sorted(owned) == list(range(PARTITIONS))
        assert any(m.computing() for m in members)  # a survivor computed in the victim's place
    finally:
        for m in members:
            m.stop()
        server.kill()


def test_the_docs_worked_example_runs(tmp_path: Path) -> None:
    """docs/client-side-assignors.md's worked example, as written, against a real server."""
    text = (ROOT / "docs" / "client-side-assignors.md").read_text()
    section = text.split("## Worked example", 1)[1]
    (dev,) = [
        line
        for line in re.findall(r"```sh\n(.*?)```", section, re.S)[0].splitlines()
        if line.startswith("groupcoord dev")
    ]
    (example,) = re.findall(r"```python\n(.*?)```", section, re.S)
    server = ServerProcess.dev(tmp_path, *shlex.split(dev)[2:])
    try:
        asyncio.run(_grpc(server.grpc_address, topics=True))
        script = example.replace("localhost:50051", server.grpc_address)
        run = subprocess.run(
            [sys.executable, "-c", script],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, run.stderr
        lines = run.stdout.splitlines()
        assert len(lines) == 3, run.stdout
        owned: list[int] = []
        for i, line in enumerate(lines):
            member, _epoch, rest = line.split(" ", 2)
            assert member == f"member-{i}"
            parts, metadata = rest.split("] ", 1)
            owned += json.loads(parts + "]")
            assert metadata == "(1, b'3 members')", line
        assert sorted(owned) == list(range(PARTITIONS))
    finally:
        server.kill()
