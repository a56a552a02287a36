"""Kafka Streams 4.4.0 with ``group.protocol=streams`` (KIP-1071) side by side: the same
application run against Apache Kafka 4.4.0's own coordinator and through groupcoord's gateway in
proxy mode in front of it (``streams_apps``), what each group and each instance sees compared
-- scaling out and in, an instance and the shard killed, the kafka-streams-groups tool, static
members restarting, standby tasks, endpoints and the shutdown request (docs/streams-groups.md).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.interop.streams_apps import (
    PARTITIONS,
    Application,
    describe_group,
    java_or_skip,
    side_by_side,
)
from tests.interop.support import Target
from tests.support.processes import ServerProcess, gateway_process

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def _scale(bootstrap: str, upstream: str, workdir: Path) -> list[dict[str, Any]]:
    """One instance, then three (scale-out), then two (one closed: scale-in); after each
    step the group settled, then BATCH records counted exactly. Returns each step's
    observation."""
    application = Application(bootstrap, upstream, workdir)
    steps: list[dict[str, Any]] = []
    try:
        application.start(1)
        steps.append(application.settled())
        application.produce_and_check()
        application.start(2)
        steps.append(application.settled())
        application.produce_and_check()
        leaving = application.apps.pop()
        leaving.close()
        assert leaving.proc.returncode == 0 and not leaving.errors, leaving.logs()
        steps.append(application.settled())
        application.produce_and_check()
        for app in application.apps:
            app.close()
        assert not [e for a in application.apps for e in a.errors]
    finally:
        application.close()
    return steps


def test_scale_out_and_in_side_by_side(kafka_target: Target, tmp_path: Path) -> None:
    """The stateful application scaled 1 -> 3 -> 2 instances, against Kafka 4.4.0 and
    through groupcoord's gateway in proxy mode, with input between the steps: after each
    step the group Stable, every member at the group epoch, every instance RUNNING with the
    tasks the coordinator gave its member; the same number of tasks per instance on both
    targets (6 tasks: 6, then 2/2/2, then 3/3), the same group epochs, and every key's count
    exact after each step. Which tasks go together may differ where Kafka's assignor breaks
    a tie by its process queue's order (docs/streams-groups.md, "Task assignment")."""
    kafka, groupcoord = side_by_side(kafka_target, tmp_path, _scale)
    print("kafka", json.dumps(kafka))
    print("groupcoord", json.dumps(groupcoord))
    all_tasks = sorted(f"{s}_{p}" for s in (0, 1) for p in range(PARTITIONS))
    for k, g, per_instance in zip(kafka, groupcoord, ([6], [2, 2, 2], [3, 3]), strict=True):
        # exactly: state, tasks per instance, the set of tasks; structurally: epochs
        for step in (k, g):
            assert step["state"] == "Stable"
            assert step["tasks per instance"] == per_instance
            assert step["tasks"] == all_tasks
            assert step["member epochs"] == [step["group epoch"]] * len(per_instance)
            assert step["assignment epoch"] == step["group epoch"]
    for run in (kafka, groupcoord):
        epochs = [s["group epoch"] for s in run]
        assert epochs == sorted(set(epochs)), epochs  # every step bumped the group epoch
    # the same epochs as Kafka's after each step (3, 5, 6 with Kafka 4.4.0): the input topic
    # is created just before the application starts and the internal topics by the
    # coordinator, and groupcoord sees both at once as Kafka does (catalog refreshed on
    # demand), not a mirror poll later (which cost an extra epoch and a heartbeat interval)
    assert [s["group epoch"] for s in groupcoord] == [s["group epoch"] for s in kafka]


def _kill_instance(
    bootstrap: str, upstream: str, workdir: Path
) -> tuple[list[dict[str, Any]], Application]:
    """Three instances, then one of them killed with SIGKILL once every count is final (and
    committed: the commit interval is 100 ms); the two survivors take its tasks when its
    session expires (45 s on both coordinators). Returns the two steps' observations and
    leaves the application running (closed by the caller)."""
    application = Application(bootstrap, upstream, workdir)
    steps: list[dict[str, Any]] = []
    try:
        application.start(3)
        steps.append(application.settled())
        application.produce_and_check()
        time.sleep(1)  # the last offsets committed
        victim = application.apps.pop()
        victim.proc.kill()
        victim.proc.wait()
        killed = time.monotonic()
        steps.append(application.settled(timeout=90))
        steps[-1]["seconds to settle"] = round(time.monotonic() - killed, 1)
        application.produce_and_check()
    except BaseException:
        application.close()
        raise
    return steps, application


def test_kill_of_an_instance_and_of_the_shard(kafka_target: Target, tmp_path: Path) -> None:
    """SIGKILL of one of three instances, against Kafka 4.4.0 (the comparison) and through
    groupcoord: the two survivors take its tasks (3 and 3) once its session expires, every
    count exact. Then, through groupcoord only, SIGKILL of the shard process that
    coordinates the group, restarted on its store (same port): the group comes back Stable
    with the same two members and tasks, and the next input is counted exactly."""
    from tests.interop.kafka_broker import free_port, groupcoord_args

    java_or_skip()
    upstream = kafka_target.bootstrap
    kafka_steps, kafka_app = _kill_instance(upstream, upstream, tmp_path / "kafka-app")
    kafka_app.close()
    (tmp_path / "shard").mkdir()
    port = free_port()
    args = [
        "dev",
        "--grpc-port",
        str(port),
        "--kafka-port",
        "0",
        "--data-dir",
        str(tmp_path / "shard" / "data"),
        "--upstream-bootstrap",
        upstream,
        *groupcoord_args(),
    ]
    shard = ServerProcess(args, tmp_path / "shard" / "shard.log")
    application = None
    try:
        gateway = gateway_process(
            shard.grpc_address, 10, tmp_path / "gateway.log", "--upstream-bootstrap", upstream
        )
        try:
            bootstrap = f"127.0.0.1:{gateway.ports['kafka']}"
            steps, application = _kill_instance(bootstrap, upstream, tmp_path / "groupcoord-app")
            before = steps[-1]
            shard.kill()
            killed = time.monotonic()
            shard = ServerProcess(args, tmp_path / "shard" / "shard2.log")
            after = application.settled(timeout=90)
            after["seconds to settle"] = round(time.monotonic() - killed, 1)
            application.produce_and_check()
            steps.append(after)
            # and still so after more than a heartbeat interval (5 s) of the restarted shard
            time.sleep(6)
            steps.append(application.settled(timeout=30))
            for app in application.apps:
                app.close()
            assert not [e for a in application.apps for e in a.errors]
        finally:
            if application is not None:
                application.close()
            gateway.kill()
    finally:
        shard.kill()
    print("kafka", json.dumps(kafka_steps))
    print("groupcoord", json.dumps(steps))
    all_tasks = sorted(f"{s}_{p}" for s in (0, 1) for p in range(PARTITIONS))
    for k, g, per_instance in zip(kafka_steps, steps[:2], ([2, 2, 2], [3, 3]), strict=True):
        for step in (k, g):
            assert step["tasks per instance"] == per_instance
            assert step["tasks"] == all_tasks
    # the restarted shard: the same members and tasks as before the kill
    assert after["instance tasks"] == before["instance tasks"] == steps[-1]["instance tasks"]
    assert after["group epoch"] >= before["group epoch"]


#: kafka-streams-groups (StreamsGroupCommand) invocations compared side by side; {g} is the
#: application id
TOOL_RUNS = (
    ("--list",),
    ("--list", "--state"),
    ("--describe", "--group", "{g}"),
    ("--describe", "--group", "{g}", "--members", "--verbose"),
    ("--describe", "--group", "{g}", "--state"),
    ("--describe", "--group", "{g}", "--state", "--verbose"),
    ("--describe", "--group", "no-such-group"),
    ("--describe", "--group", "{g}", "--topology"),
    ("--delete", "--group", "{g}"),
)
#: ... once the application is closed (its members left: the group Empty)
TOOL_RUNS_EMPTY = (
    ("--describe", "--group", "{g}", "--state"),
    ("--reset-offsets", "--group", "{g}", "--all-input-topics", "--to-earliest", "--dry-run"),
    ("--reset-offsets", "--group", "{g}", "--all-input-topics", "--to-earliest", "--execute"),
    ("--reset-offsets", "--group", "{g}", "--input-topic", "{in}", "--to-offset", "7", "--execute"),
    ("--describe", "--group", "{g}", "--offsets"),
    ("--delete-offsets", "--group", "{g}", "--input-topic", "{in}"),
    ("--describe", "--group", "{g}", "--offsets"),
    ("--delete", "--group", "{g}"),
    ("--list",),
)


def _tool(bootstrap: str, *args: str) -> str:
    """Kafka 4.4.0's ``kafka-streams-groups.sh`` (its class, on the tools' jars) against
    ``bootstrap``: exit code, stdout and the first line of stderr."""
    from tests.interop.kafka_broker import tools_libs

    r = subprocess.run(
        [
            "java",
            "-Xmx256m",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            f"{tools_libs()}/*",
            "org.apache.kafka.tools.streams.StreamsGroupCommand",
            "--bootstrap-server",
            bootstrap,
            "--timeout",
            "15000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    first_error = next((line for line in r.stderr.splitlines() if line.strip()), "")
    return f"rc={r.returncode}\n{r.stdout}\n{first_error}"


def _normalized(text: str, names: dict[str, str]) -> list[str]:
    """``text`` with what differs by nature between two runs replaced (the application's and
    topics' names, member/process ids, the coordinator's address) and each table's rows
    sorted (the tool prints some from hash maps), columns re-spaced; rows of other groups
    (other tests' applications on the shared reference cluster) left out."""
    import re

    for real, placeholder in sorted(names.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(real, placeholder)
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "PROCESS", text)
    text = re.sub(r"\b127\.0\.0\.1:\d+ \(\d+\)", "COORDINATOR", text)
    rows = [" ".join(line.split()) for line in text.splitlines()]
    rows = [re.sub(r"^(APP) [A-Za-z0-9_-]{22} ", r"\1 MEMBER ", r) for r in rows]
    rows = [re.sub(r" [A-Za-z0-9_-]{22} streams ", " MEMBER streams ", r) for r in rows]
    # other tests' applications on the same reference cluster (--list lists every group)
    rows = [r for r in rows if r and not re.match(r"streams-[a-z]+-[0-9a-f]{8}\b", r)]
    headers = [r for r in rows[1:] if r.startswith("GROUP ")]
    return rows[:1] + headers + sorted(r for r in rows[1:] if not r.startswith("GROUP "))


def _tool_answers(bootstrap: str, upstream: str, workdir: Path) -> list[list[str]]:
    application = Application(bootstrap, upstream, workdir)
    try:
        application.start(1)
        application.settled()
        application.produce_and_check()
        names = {
            application.app_id: "APP",
            f"{application.app_id}-by-mod-repartition": "REPARTITION",
            application.topics[0]: "IN",
            application.topics[1]: "OUT",
        }
        values = {"g": application.app_id, "in": application.topics[0]}

        def run(runs: tuple[tuple[str, ...], ...]) -> list[list[str]]:
            return [
                _normalized(_tool(bootstrap, *(a.format(**values) for a in args)), names)
                for args in runs
            ]

        running = run(TOOL_RUNS)
        for app in application.apps:
            app.close()
        deadline = time.monotonic() + 30
        while describe_group(bootstrap, application.app_id).group_state != "Empty":
            assert time.monotonic() < deadline, "the closed application's group is not Empty"
            time.sleep(0.2)
        return running + run(TOOL_RUNS_EMPTY)
    finally:
        application.close()


def test_kafka_streams_groups_tool_side_by_side(kafka_target: Target, tmp_path: Path) -> None:
    """Kafka's own admin tool, ``kafka-streams-groups`` (4.4.0), against Kafka directly and
    through the gateway, the same one-instance application running: --list (with states),
    --describe (offsets/lag, --members, --members --verbose, --state, --state --verbose,
    --topology), an unknown group, and --delete of the running group (refused: not empty);
    then, the application closed (the group Empty): --reset-offsets (dry run, to earliest,
    to an offset), --delete-offsets, --delete, --list -- all print the same, once names, ids,
    the coordinator's address and the order of rows are normalized."""
    kafka, ours = side_by_side(kafka_target, tmp_path, _tool_answers)
    for args, k, g in zip(TOOL_RUNS + TOOL_RUNS_EMPTY, kafka, ours, strict=True):
        assert g == k, (args, k, g)
    # what the comparison covered (not vacuous): the assignor, the tasks, a refused delete
    flat = "\n".join(line for answer in kafka for line in answer)
    assert "sticky" in flat and "ACTIVE: 0:[0,1,2]; 1:[0,1,2];" in flat
    assert "is not EMPTY" in flat and "GroupIdNotFoundException" in flat
    assert "APP REPARTITION 2 0" in flat and "APP IN 1 7" in flat
    assert "Deletion of requested streams groups ('APP') was successful." in flat


def _static_restart(bootstrap: str, upstream: str, workdir: Path) -> list[dict[str, Any]]:
    """Two static instances settled and counting; one closed *remaining in the group* (its
    member stays, at epoch -2, with its tasks), then started again on the same state
    directory (same process id) and instance id: it takes its place back. Returns the
    observations: settled before, the describe while it is away, settled after."""
    application = Application(bootstrap, upstream, workdir)
    steps: list[dict[str, Any]] = []
    try:
        application.start(2, static=True)
        steps.append(application.settled())
        application.produce_and_check()
        leaving = application.apps.pop()
        before = leaving.view()["tasks"]
        leaving.close(remain=True)
        assert leaving.proc.returncode == 0 and not leaving.errors, leaving.logs()
        g = describe_group(bootstrap, application.app_id)
        steps.append(
            {
                "state": g.group_state,
                "group epoch": g.group_epoch,
                "member epochs": sorted(m.member_epoch for m in g.members),
                "instance ids": sorted(m.instance_id for m in g.members),
            }
        )
        application.start(1, static=True, slot=1)
        after = application.settled()
        mine = application.apps[-1].view()["tasks"]
        after["returned with its tasks"] = sorted(mine) == sorted(before)
        steps.append(after)
        application.produce_and_check()
        for app in application.apps:
            app.close()
    finally:
        application.close()
    return steps


def test_static_members_restart_side_by_side(kafka_target: Target, tmp_path: Path) -> None:
    """Static membership with real Kafka Streams 4.4.0 instances (``group.instance.id``),
    against Kafka 4.4.0 and through the gateway: an instance closed with REMAIN_IN_GROUP
    leaves its member in the group at epoch -2 (the group epoch unchanged); restarted with
    the same instance id and state directory it gets the same tasks back with no new group
    epoch; the counts are exact before and after. Same epochs and states on both."""
    kafka, ours = side_by_side(kafka_target, tmp_path, _static_restart)
    print("kafka", json.dumps(kafka))
    print("groupcoord", json.dumps(ours))
    settled, away, back = kafka
    assert away["member epochs"][0] == -2 and away["group epoch"] == settled["group epoch"]
    # (Kafka Streams gives each stream thread "<group.instance.id>-<thread index>")
    assert away["instance ids"] == ["instance-0-1", "instance-1-1"]
    assert back["group epoch"] == settled["group epoch"] and back["returned with its tasks"]

    def relative(run: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Epochs relative to the first settled group epoch (which of 3 or 4 it is depends on
        whether the second instance joined before or after the internal topics existed: on
        both servers), -2 kept as it is."""
        base = run[0]["group epoch"]
        return [
            {
                "state": step["state"],
                "group epoch": step["group epoch"] - base,
                "member epochs": [e if e < 0 else e - base for e in step["member epochs"]],
                "tasks per instance": step.get("tasks per instance"),
                "instance ids": step.get("instance ids"),
                "returned": step.get("returned with its tasks"),
            }
            for step in run
        ]

    assert relative(ours) == relative(kafka)
    assert relative(kafka)[1]["member epochs"] == [-2, 0]  # (the comparison is not vacuous)


def _set_group_config(bootstrap: str, group: str, name: str, value: str) -> None:
    """IncrementalAlterConfigs SET of one GROUP config (what kafka-configs sends)."""
    import asyncio

    from tests.support.kafka_wire import KafkaWire, request

    host, port = bootstrap.split(":")

    async def send() -> None:
        wire = await KafkaWire.connect(host, int(port))
        try:
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
            assert int(r.responses[0].error_code) == 0, r
        finally:
            await wire.close()

    asyncio.run(send())


def _standbys_held(bootstrap: str, application: Application) -> list[dict[str, Any]]:
    """Until each instance's own standby tasks are those the coordinator's describe gives its
    member and every stateful task has its standby (60 s at most): each instance's active
    and standby tasks ("<subtopology>_<partition>", sorted), in the instances' order."""
    deadline = time.monotonic() + 60
    while True:
        g = describe_group(bootstrap, application.app_id)
        wanted = sorted(
            sorted(
                f"{t.subtopology_id}_{p}" for t in m.assignment.standby_tasks for p in t.partitions
            )
            for m in g.members
        )
        views = [a.view() for a in application.apps]
        held = sorted(sorted(v["standby"]) for v in views)
        if held == wanted and sum(map(len, held)) == PARTITIONS:
            return [{"active": sorted(v["tasks"]), "standby": sorted(v["standby"])} for v in views]
        assert time.monotonic() < deadline, (wanted, held)
        time.sleep(0.5)


def _standbys_endpoints_and_shutdown(
    bootstrap: str, upstream: str, workdir: Path
) -> dict[str, Any]:
    """The application with streams.num.standby.replicas = 1 and three instances with
    interactive-query endpoints, settled and counting, standbys held; then the third closes
    (do its stateful tasks go to the instances that held them as standbys?) and the two
    settle with their standbys; until each instance knows both endpoints with the
    partitions of their tasks; then one instance asks for an application shutdown: what each
    instance holds and knows, and the instances' states."""
    application = Application(bootstrap, upstream, workdir)
    try:
        _set_group_config(bootstrap, application.app_id, "streams.num.standby.replicas", "1")
        time.sleep(1)  # (Kafka applies a group config through its metadata log)
        application.start(3, endpoints=True)
        application.settled()
        application.produce_and_check()
        three = _standbys_held(bootstrap, application)
        # the third instance leaves: its stateful (1_*) active tasks, and who had them as
        # standbys (never the third itself)
        holder = {t: k for k, v in enumerate(three[:2]) for t in v["standby"]}
        leaving = [t for t in three[2]["active"] if t.startswith("1_")]
        third = application.apps.pop()
        third.close()
        settled = application.settled()
        after = [sorted(a.view()["tasks"]) for a in application.apps]
        taken_over = {t: t in after[holder[t]] for t in leaving if t in holder}
        application.produce_and_check()
        pairs = _standbys_held(bootstrap, application)
        g = describe_group(bootstrap, application.app_id)

        # interactive queries: subtopology 0 reads the input topic, 1 the repartition topic
        sources = {"0": application.topics[0], "1": f"{application.app_id}-by-mod-repartition"}

        def partitions(tasks: list[str]) -> list[str]:
            return sorted(f"{sources[t.split('_')[0]]}-{t.split('_')[1]}" for t in tasks)

        expected = {
            f"localhost:{17000 + k}": {
                "active": partitions(p["active"]),
                "standby": partitions(p["standby"]),
            }
            for k, p in enumerate(pairs)
        }
        deadline = time.monotonic() + 60
        while (known := [a.hosts() for a in application.apps]) != [expected] * 2:
            assert time.monotonic() < deadline, (expected, known)
            time.sleep(0.5)

        # one instance fails asking for the application's shutdown: every instance stops
        application.producer.produce(application.topics[0], b"shutdown", b"kshutdown")
        assert application.producer.flush(30) == 0
        deadline = time.monotonic() + 90
        while any(a.state != "ERROR" for a in application.apps):
            assert time.monotonic() < deadline, [a.state for a in application.apps]
            time.sleep(0.5)
        stopped = sorted((a.state, len(a.errors)) for a in application.apps)
        for app in application.apps:
            app.close()
        return {
            "three": three,
            "taken over by the standby": taken_over,
            "settled": settled,
            "instances": pairs,
            "endpoints": expected,
            "group epoch": g.group_epoch,
            "after shutdown": stopped,
        }
    finally:
        application.close()


def test_standby_tasks_endpoints_and_shutdown_side_by_side(
    kafka_target: Target, tmp_path: Path
) -> None:
    """``streams.num.standby.replicas`` = 1 (a group config, set before the application
    starts) with three real Kafka Streams 4.4.0 instances with interactive-query endpoints
    (``application.server``), against Kafka 4.4.0 and through the gateway: each stateful task
    has one standby off its active's instance; the third instance closes and its stateful
    tasks become active on the instances that held their standbys (no state restored from
    scratch); then each of the two runs
    3 active tasks and keeps, as standby tasks, the *other* instance's active tasks of the
    stateful subtopology (1, the count's store; a stateless task gets no standby) -- its own
    view (metadataForLocalThreads) equal to the coordinator's describe; each instance's
    metadataForAllStreamsClients names both endpoints with the input and repartition
    partitions of their active and standby tasks; the counts are exact; then a record makes
    one instance ask for an application shutdown (SHUTDOWN_APPLICATION) and both instances
    end in ERROR -- on both servers."""
    kafka, ours = side_by_side(kafka_target, tmp_path, _standbys_endpoints_and_shutdown)
    print("kafka", json.dumps(kafka))
    print("groupcoord", json.dumps(ours))

    def stateful(tasks: list[str]) -> list[str]:
        return [t for t in tasks if t.startswith("1_")]

    for run in (kafka, ours):
        # three instances: two active tasks each; every stateful task has one standby, never
        # on its active's instance
        assert [len(i["active"]) for i in run["three"]] == [2, 2, 2], run
        assert sorted(t for i in run["three"] for t in i["standby"]) == [
            f"1_{p}" for p in range(PARTITIONS)
        ], run
        assert all(not set(i["standby"]) & set(i["active"]) for i in run["three"]), run
        # the third left: its stateful tasks went to the instances that held their standbys
        assert run["taken over by the standby"], run  # (it ran a stateful task)
        assert all(run["taken over by the standby"].values()), run
        one, two = run["instances"]
        assert len(one["active"]) == len(two["active"]) == 3, run

        assert one["standby"] == stateful(two["active"]), run
        assert two["standby"] == stateful(one["active"]), run
        assert len(one["standby"]) + len(two["standby"]) == PARTITIONS, run
        assert sorted(run["endpoints"]) == ["localhost:17000", "localhost:17001"], run
    # the failing instance reports its error, the other none; both stop
    assert ours["after shutdown"] == kafka["after shutdown"] == [("ERROR", 0), ("ERROR", 1)]
