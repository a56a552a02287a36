"""The image and the compose stack, for real (podman + runc; slow): the Dockerfile builds on
the registry-free Debian base; the compose file comes up healthy with local stand-ins for the
public images; a confluent-kafka consumer group (KIP-848) joins through a published gateway
port, commits and reads back; a killed shard's partitions are served by another; `compose
down` leaves nothing behind. The redis-cluster profile forms a cluster whose shards, pointed
at it by deploy/compose/redis-cluster.yml, serve every partition. Every container, volume,
network and image is removed, also when a test fails (per-run names)."""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic

from shards.core.placement import partition_for
from tests.support.containers import (
    ROOT,
    ContainerToolsMissing,
    base_image,
    build_image,
    grpc_serving,
    podman_env,
    remove_images,
    run,
)
from tests.support.deploy import CHART
from tests.support.kafka_groups import join_commit_read, wait_for
from tests.support.redis_server import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

RUN = uuid.uuid4().hex[:8]
SUPPORT = ROOT / "tests" / "support" / "containers"
#: podman-compose 1.x from the test extras, next to this interpreter
PODMAN_COMPOSE = str(Path(sys.executable).parent / "podman-compose")


@dataclass
class Images:
    env: dict[str, str]
    groupcoord: str
    redis: str
    timings: dict[str, float]


@pytest.fixture(scope="module")
def images() -> Iterator[Images]:
    try:
        env = podman_env()
    except ContainerToolsMissing as e:
        pytest.fail(str(e), pytrace=False)
    timings: dict[str, float] = {}
    started = time.monotonic()
    base = base_image(env)
    timings["base image"] = time.monotonic() - started
    built = Images(
        env, f"localhost/groupcoord-test:{RUN}", f"localhost/groupcoord-test-redis:{RUN}", timings
    )
    try:
        timings["groupcoord image"] = build_image(built.groupcoord, env, base)
        timings["redis stand-in"] = build_image(
            built.redis, env, base, SUPPORT / "redis.Containerfile", SUPPORT
        )
        yield built
    finally:
        remove_images([built.groupcoord, built.redis], env)
        print(f"\ncontainer build timings (s): {json.dumps(timings)}")


def test_image_is_one_slim_non_root_image_for_every_process(images: Images) -> None:
    env = images.env
    info = json.loads(run(["podman", "image", "inspect", images.groupcoord], env).stdout)[0]
    config = info["Config"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["groupcoord"]
    assert config["Cmd"] == ["dev"]
    assert "groupcoord health" in " ".join(info["Healthcheck"]["Test"])
    size_mb = info["Size"] / 1e6
    print(f"\nimage size: {size_mb:.0f} MB")
    assert size_mb < 400
    image = ["podman", "run", "--rm", images.groupcoord]
    assert run([*image, "--version"], env).stdout.startswith("groupcoord, version")
    for command in ("dev", "shard", "gateway", "assignor", "partitions", "repair"):
        run([*image, command, "--help"], env)
    # no compiler, no pip in the final image; the process user owns only its data dir
    probe = run(
        [
            "podman", "run", "--rm", "--entrypoint", "sh", images.groupcoord, "-c",
            "for t in gcc cc c++ g++ make pip pip3; do command -v $t; done; id -u; "
            "touch /var/lib/groupcoord/w && echo writable; touch /opt/x 2>/dev/null || echo ro",
        ],
        env,
        check=False,
    )  # fmt: skip
    assert probe.stdout.split() == ["10001", "writable", "ro"], probe.stdout


@pytest.mark.parametrize(
    "profiles, expected",
    [
        ((), set()),
        (("proxy",), {"kafka"}),
        (("observability",), {"otel-collector", "prometheus"}),
        (("redis-cluster",), {f"redis-cluster-{i}" for i in range(6)} | {"redis-cluster-create"}),
    ],
)
def test_compose_file_resolves_with_each_profile(
    profiles: tuple[str, ...], expected: set[str]
) -> None:
    """podman-compose itself reads the file (anchors, merges, interpolation) per profile."""
    try:
        env = podman_env()
    except ContainerToolsMissing as e:
        pytest.fail(str(e), pytrace=False)
    args = [arg for profile in profiles for arg in ("--profile", profile)]
    out = run([PODMAN_COMPOSE, *args, "config"], env).stdout
    services = set(yaml.safe_load(out[out.index("name:") :])["services"])
    base = {"redis", "assignor-1", "assignor-2", "shard-0", "shard-1", "shard-2"}
    assert services == base | {"gateway-1", "gateway-2"} | expected


def test_compose_redis_cluster_overlay_resolves_with_the_profile() -> None:
    """podman-compose merges deploy/compose/redis-cluster.yml: every shard gets the URL, and
    without REDIS_CLUSTER_URL the file is refused rather than left on the single Redis."""
    try:
        env = podman_env()
    except ContainerToolsMissing as e:
        pytest.fail(str(e), pytrace=False)
    files = ["-f", "docker-compose.yml", "-f", "deploy/compose/redis-cluster.yml"]
    url = "redis+cluster://redis-cluster-0:6379,redis-cluster-1:6379?wait_replicas=1"
    out = run(
        [PODMAN_COMPOSE, *files, "--profile", "redis-cluster", "config"],
        {**env, "REDIS_CLUSTER_URL": url},
    ).stdout
    services = yaml.safe_load(out[out.index("name:") :])["services"]
    for name in ("shard-0", "shard-1", "shard-2"):
        assert services[name]["environment"]["GROUPCOORD_STORE"] == url
        assert services[name]["environment"]["GROUPCOORD_NODE_ID"] == name[-1]
    assert "redis-cluster-create" in services
    unset = {k: v for k, v in env.items() if k != "REDIS_CLUSTER_URL"}
    refused = run([PODMAN_COMPOSE, *files, "config"], unset, check=False)
    assert refused.returncode != 0
    assert "REDIS_CLUSTER_URL" in refused.stdout + refused.stderr


@dataclass
class Stack:
    env: dict[str, str]
    project: str
    kafka_1: str
    kafka_2: str
    image: str

    def compose(self, *args: str, timeout: float = 300) -> Any:
        return run(
            [PODMAN_COMPOSE, "-p", self.project, *args],
            self.env,
            timeout=timeout,
        )

    def container(self, service: str) -> str:
        return f"{self.project}_{service}_1"

    def partitions(self, via: str) -> dict[str, Any]:
        out = run(
            ["podman", "exec", self.container(via), "groupcoord", "partitions", "--store",
             "redis://redis:6379/0", "--format", "json"],
            self.env,
        ).stdout  # fmt: skip
        return json.loads(out)  # type: ignore[no-any-return]

    def logs(self, *services: str, tail: int = 60) -> str:
        """The last lines each of ``services`` logged: attached to a failure of the stack."""
        parts = []
        for service in services:
            out = run(["podman", "logs", "--tail", str(tail), self.container(service)],
                      self.env, check=False)  # fmt: skip
            parts.append(f"--- {service} ---\n{out.stdout}{out.stderr}")
        return "\n".join(parts)

    def leftovers(self) -> list[str]:
        label = f"label=io.podman.compose.project={self.project}"
        found = []
        for kind in ("ps -a", "volume ls", "network ls"):
            out = run(["podman", *kind.split(), "--filter", label, "--format", "{{.ID}}"], self.env)
            found += [f"{kind}: {line}" for line in out.stdout.split()]
        return found


@pytest.fixture
def stack(images: Images) -> Iterator[Stack]:
    env = dict(images.env)
    ports = [free_port() for _ in range(4)]
    env.update(
        GROUPCOORD_IMAGE=images.groupcoord,
        REDIS_IMAGE=images.redis,
        GATEWAY_1_PORT=str(ports[0]),
        GATEWAY_2_PORT=str(ports[1]),
        GATEWAY_1_BROKER_1_PORT=str(ports[2]),
        GATEWAY_2_BROKER_1_PORT=str(ports[3]),
        # a killed shard must stay dead (to see another serve its partitions), and its lease
        # run out soon
        RESTART_POLICY="no",
        SHARD_LEASE_MS="3000",
    )
    s = Stack(
        env, f"gctest{RUN}", f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}", images.groupcoord
    )
    try:
        yield s
    finally:
        run([PODMAN_COMPOSE, "-p", s.project, "down", "-v"],
            env, check=False, timeout=300)  # fmt: skip
        label = f"label=io.podman.compose.project={s.project}"
        for ids, rm in (
            ("ps -aq", "rm -f"),
            ("volume ls -q", "volume rm -f"),
            ("network ls -q", "network rm -f"),
        ):
            out = run(["podman", *ids.split(), "--filter", label], env, check=False).stdout.split()
            if out:
                run(["podman", *rm.split(), *out], env, check=False)


GROUPCOORD_SERVICES = {
    "assignor-1": "127.0.0.1:50061",
    "assignor-2": "127.0.0.1:50061",
    "shard-0": "127.0.0.1:50051",
    "shard-1": "127.0.0.1:50051",
    "shard-2": "127.0.0.1:50051",
    "gateway-1": "127.0.0.1:9080",
    "gateway-2": "127.0.0.1:9080",
}


def test_compose_stack_serves_a_consumer_group_and_survives_a_shard_kill(stack: Stack) -> None:
    env = stack.env
    # podman-compose on this podman (4.3) cannot wait for "healthy" conditions; start the
    # store first, as `depends_on: condition: service_healthy` does with Docker Compose
    stack.compose("up", "-d", "redis")
    wait_for("redis", lambda: run(["podman", "exec", stack.container("redis"), "redis-cli", "ping"],
                                  env, check=False).stdout.strip() == "PONG", 60)  # fmt: skip
    for name, value in (("appendonly", "yes"), ("appendfsync", "always")):
        got = run(["podman", "exec", stack.container("redis"), "redis-cli", "config", "get", name],
                  env).stdout.split()  # fmt: skip
        assert got == [name, value]
    stack.compose("up", "-d")
    for service, address in GROUPCOORD_SERVICES.items():
        wait_for(
            f"{service} SERVING",
            lambda s=service, a=address: grpc_serving(stack.container(s), a, env),
            120,
        )

    # the chart's `helm test` script, as its hook pod runs it: the image's python, read-only
    smoke = run(
        ["podman", "run", "--rm", "--read-only", "--network", f"{stack.project}_default",
         "-v", f"{CHART / 'files' / 'smoke.py'}:/smoke/smoke.py:ro",
         "--entrypoint", "python", stack.image, "/smoke/smoke.py",
         "--health", "shard-1:50051", "--health", "assignor-2:50061",
         "--health", "gateway-1:9080", "--kafka", f"gateway-1:{stack.kafka_1.rsplit(':', 1)[1]}",
         "--timeout", "120"],
        env,
        timeout=200,
        check=False,
    )  # fmt: skip
    assert "committed and fetched offset 4242" in smoke.stdout, (
        f"smoke check exited {smoke.returncode}\n{smoke.stdout}{smoke.stderr}\n"
        + stack.logs("gateway-1", "shard-0", "shard-1", "shard-2")
    )

    # a consumer group through the first gateway's published port
    admin = AdminClient({"bootstrap.servers": stack.kafka_1})
    (future,) = admin.create_topics([NewTopic("orders", 4, 1)]).values()
    future.result(30)
    group = f"orders-{RUN}"
    first = {p: 100 + p for p in range(4)}
    assert join_commit_read(stack.kafka_1, group, "orders", first) == {p: -1001 for p in range(4)}

    # kill -9 the shard holding the group's offsets partition
    partition = partition_for(group, 50)
    holder = stack.partitions("shard-0")["partitions"][partition]["holder"]
    killed = f"shard-{holder}"
    run(["podman", "kill", "--signal", "KILL", stack.container(killed)], env)
    survivor = next(s for s in ("shard-0", "shard-1", "shard-2") if s != killed)

    def moved() -> bool:
        state = stack.partitions(survivor)["partitions"][partition]
        return state["holder"] not in (holder, None) and state["state"] == "ACTIVE"

    wait_for(f"partition {partition} served by another shard", moved, 60)
    # nothing lost, and the group keeps working, here through the second gateway
    second = {p: 200 + p for p in range(4)}
    assert join_commit_read(stack.kafka_2, group, "orders", second) == first

    stack.compose("down", "-v")
    assert stack.leftovers() == []


def test_compose_redis_cluster_profile_forms_a_cluster(images: Images) -> None:
    """The profile's six nodes and its one-shot create job form a cluster of 3 primaries + 3
    replicas, the replicas in sync when the job exits (shards with ``wait_replicas=1`` need
    them). The overlay that points the shards at it is resolved above; shards serving from a
    Redis Cluster are tested on loopback (tests/chaos, tests/integration/storage)."""
    env = {**images.env, "REDIS_IMAGE": images.redis, "RESTART_POLICY": "no"}
    project = f"gcrc{RUN}"
    compose = [PODMAN_COMPOSE, "-p", project, "--profile", "redis-cluster"]

    def container(service: str) -> str:
        return f"{project}_{service}_1"

    def state(service: str) -> str:
        out = run(["podman", "inspect", container(service), "--format",
                   "{{.State.Status}} {{.State.ExitCode}}"], env, check=False)  # fmt: skip
        return out.stdout.strip()

    try:
        run([*compose, "up", "-d", "redis-cluster-create"], env, timeout=300)
        wait_for("redis-cluster-create done",
                 lambda: state("redis-cluster-create").startswith("exited"), 120)  # fmt: skip
        assert state("redis-cluster-create") == "exited 0", run(
            ["podman", "logs", container("redis-cluster-create")], env, check=False
        ).stdout
        cli = ["podman", "exec", container("redis-cluster-0"), "redis-cli"]
        info = run([*cli, "cluster", "info"], env).stdout
        assert "cluster_state:ok" in info and "cluster_size:3" in info, info
        roles = []
        for i in range(6):
            out = run(["podman", "exec", container(f"redis-cluster-{i}"), "redis-cli",
                       "info", "replication"], env).stdout  # fmt: skip
            if "role:master" in out:
                roles.append("primary")
            else:
                in_sync = "master_link_status:up" in out
                roles.append("replica in sync" if in_sync else "replica not in sync")
        # the job exits once every replica is in sync
        assert sorted(roles) == ["primary"] * 3 + ["replica in sync"] * 3, roles
    finally:
        run([*compose, "down", "-v"], env, check=False, timeout=300)
        label = f"label=io.podman.compose.project={project}"
        for ids, rm in (
            ("ps -aq", "rm -f"),
            ("volume ls -q", "volume rm -f"),
            ("network ls -q", "network rm -f"),
        ):
            out = run(["podman", *ids.split(), "--filter", label], env, check=False).stdout.split()
            if out:
                run(["podman", *rm.split(), *out], env, check=False)
