"""A real Redis Cluster for tests: ``redis-server --cluster-enabled yes`` processes on
loopback ports, joined with ``redis-cli --cluster create`` (3 primaries + 3 replicas by
default), each in its own directory with the durable settings of
:mod:`tests.support.redis_server`.

    with RedisCluster.start(tmp_path) as cluster:
        cluster.url                     # redis+cluster://127.0.0.1:p1,127.0.0.1:p2,...
        cluster.primary_of_slot(slot)   # the LocalRedisServer serving a slot
        cluster.kill(server) / pause / resume
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import redis

from tests.support.redis_server import LocalRedisServer, RedisServerUnavailable, free_port

#: how long a node may be unreachable before the others fail it over (Redis's default is
#: 15 s; tests want a failover in a few seconds)
NODE_TIMEOUT_MS = 1500
READY_TIMEOUT_S = 30.0


class RedisClusterServers:
    def __init__(self, base: Path, servers: list[LocalRedisServer]) -> None:
        self.base = base
        self.servers = servers

    @classmethod
    def start(
        cls,
        base: Path,
        *,
        primaries: int = 3,
        replicas_per_primary: int = 1,
        make_server: Callable[[int, Path, list[str]], LocalRedisServer] | None = None,
    ) -> RedisClusterServers:
        """``make_server(i, data_dir, cluster_args)``: node ``i``'s server, not started (by
        default a LocalRedisServer on loopback); it is joined at its ``host``."""
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RedisServerUnavailable("redis-cli is not installed (it creates the cluster)")
        servers: list[LocalRedisServer] = []
        count = primaries * (1 + replicas_per_primary)
        try:
            for i in range(count):
                args = [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    str(base / f"node{i}" / "nodes.conf"),
                    "--cluster-node-timeout",
                    str(NODE_TIMEOUT_MS),
                    # the other primaries' slots keep serving while one fails over
                    "--cluster-require-full-coverage",
                    "no",
                    # a replica's full sync starts at once: Redis waits 5 s by default for
                    # more replicas to share a diskless transfer (at creation, and when a
                    # node rejoins after a failover)
                    "--repl-diskless-sync-delay",
                    "0",
                    # the bus port would be port + 10000 (over 65535 for a high free port)
                    "--cluster-port",
                    str(free_port()),
                ]
                if make_server is None:
                    server = LocalRedisServer(base / f"node{i}", extra_args=args)
                else:
                    server = make_server(i, base / f"node{i}", args)
                server.start()
                servers.append(server)
            addresses = [f"{s.host}:{s.port}" for s in servers]
            result = subprocess.run(
                [
                    cli,
                    "--cluster",
                    "create",
                    *addresses,
                    "--cluster-replicas",
                    str(replicas_per_primary),
                    "--cluster-yes",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if result.returncode != 0:
                raise RedisServerUnavailable(
                    f"redis-cli --cluster create failed:\n{result.stdout[-2000:]}"
                    f"{result.stderr[-2000:]}"
                )
            cluster = cls(base, servers)
            cluster.wait_until_ok(expected_replicas=replicas_per_primary)
            return cluster
        except BaseException:
            for server in servers:
                server.kill()
            raise

    @property
    def url(self) -> str:
        seeds = ",".join(f"{s.host}:{s.port}" for s in self.servers)
        return f"redis+cluster://{seeds}"

    @staticmethod
    def bus_port(server: LocalRedisServer) -> int:
        """The node's cluster bus port."""
        return int(server.extra_args[server.extra_args.index("--cluster-port") + 1])

    def live(self) -> list[LocalRedisServer]:
        return [s for s in self.servers if s.process is not None]

    def client(self, server: LocalRedisServer) -> redis.Redis:
        return redis.Redis(host=server.host, port=server.port, socket_timeout=2.0)

    def role(self, server: LocalRedisServer) -> str:
        with self.client(server) as c:
            return str(c.info("replication")["role"])

    def primaries(self) -> list[LocalRedisServer]:
        return [s for s in self.live() if self.role(s) == "master"]

    def primary_of_slot(self, slot: int) -> LocalRedisServer:
        """The live server that primaries this slot, as the first live node sees it."""
        for server in self.live():
            try:
                with self.client(server) as c:
                    for start, end, primary, *_ in c.execute_command("CLUSTER SLOTS"):
                        if int(start) <= slot <= int(end):
                            port = int(primary[1])
                            return next(s for s in self.servers if s.port == port)
            except redis.RedisError:
                continue
        raise RuntimeError(f"no live node knows slot {slot}")

    def online_replicas(self, primary: LocalRedisServer) -> int:
        """Replicas that finished their sync (WAIT counts only those)."""
        with self.client(primary) as c:
            info = c.info("replication")
        return sum(
            1
            for k, v in info.items()
            if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online"
        )

    def replicas_of(self, primary: LocalRedisServer) -> list[LocalRedisServer]:
        with self.client(primary) as c:
            info = c.info("replication")
        ports = {
            int(v["port"]) for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)
        }
        return [s for s in self.servers if s.port in ports]

    def wait_until_ok(
        self, *, expected_replicas: int = 1, timeout_s: float = READY_TIMEOUT_S
    ) -> None:
        """Every live node sees cluster_state:ok and every primary has its replicas."""
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            try:
                states = []
                for server in self.live():
                    with self.client(server) as c:
                        states.append(c.cluster("info")["cluster_state"] == "ok")
                primaries = self.primaries()
                replicas_ok = all(self.online_replicas(p) >= expected_replicas for p in primaries)
                if all(states) and replicas_ok and primaries:
                    return
                last = f"states={states} replicas_ok={replicas_ok}"
            except redis.RedisError as e:
                last = str(e)
            time.sleep(0.1)
        raise RedisServerUnavailable(f"Redis Cluster not ready in {timeout_s} s: {last}")

    def wait_for_failover(self, dead: LocalRedisServer, timeout_s: float = 30.0) -> float:
        """Seconds until every slot ``dead`` served has a live primary (cluster_state ok)."""
        started = time.monotonic()
        self.wait_until_ok(expected_replicas=0, timeout_s=timeout_s)
        return time.monotonic() - started

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def __enter__(self) -> RedisClusterServers:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
