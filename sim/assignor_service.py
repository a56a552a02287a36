"""The assignor service in the simulation (``Config.assignor_service_share`` of the seeds).

Replicas of the real :class:`~services.assignor.servicer.AssignorService` (its decode,
validation, assignors, encoding and status codes) answer the shards' real
:class:`~services.assignor.client.RemoteAssignor` (deadline per call, retries with backoff
over the replicas in turn, the in-process fallback) over the simulated network -- the gRPC
channel is the one part replaced: each replica is one ``call(raw, timeout=s)``, as a client
given several replica host names has one channel each. Every consumer group target goes to
the service (the in-line size limits are 0, as for groups too large to assign in the
heartbeat), so every epoch bump takes this path.

What the replicas do to their clients: a seeded compute time (mostly milliseconds, one time
in seven 0.5-3 s, longer than the 1 s deadline at times), now and then ``UNAVAILABLE``
(overloaded), requests and answers lost while the faults last. Faults (``assignor_kill``,
``assignor_pause``, drawn by an RNG of their own): a replica killed -- its connections reset,
so its calls in flight and new ones fail ``UNAVAILABLE`` at once -- and restarted after a
while, or paused (SIGSTOP: its calls time out). When the faults stop, every replica runs.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
from typing import TYPE_CHECKING, Any

import grpc

from services.assignor.client import AssignorClientSettings, RemoteAssignor
from services.assignor.servicer import AssignorService
from sim.loop import PROCESS
from sim.processes import Hop, Processes, rpc_error

if TYPE_CHECKING:
    from sim.events import Config
    from sim.world import Sim


#: the assignors the replicas loaded, shared by all (they keep no state between calls;
#: loading one scans the entry points: slow to do per replica incarnation)
_LOADED: dict[str, Any] = {}


def assignor_service(seed: int, cfg: Config) -> bool:
    """Whether ``seed`` computes its targets on the assignor service (an RNG of its own)."""
    return random.Random(f"assignor-service-{seed}").random() < cfg.assignor_service_share


class _Context:
    """The part of ``grpc.aio.ServicerContext`` the servicer uses: ``abort``."""

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise rpc_error(code, details)


class Replica:
    """One incarnation of an assignor replica process."""

    def __init__(self, sim: Sim, index: int, incarnation: int) -> None:
        self.index = index
        self.name = f"assignor{index}.{incarnation}"
        self.service = AssignorService(loaded=_LOADED)
        self.alive = True
        self.rng = random.Random(f"assignor-replica-{sim.seed}-{self.name}")
        #: the process's context (sim.loop.PROCESS names it: the loop can pause it)
        self.ctx = contextvars.copy_context()
        self.ctx.run(PROCESS.set, self)
        #: resolved when the process dies: its connections are reset
        self.dead: asyncio.Future[None] = sim.loop.create_future()


class AssignorServiceWorld(Processes):
    """The replicas, their faults, and the shards' clients of them."""

    area = "assignor_service"
    hop = Hop(
        request_lost="assign request to {callee} lost",
        answer_lost="assign answer from {callee} lost",
        refused="connection refused",
        lost="request lost",
        answer_lost_key="answer lost",
        reset="connection reset",
        deadline="deadline exceeded",
    )
    label = "replica "

    def __init__(self, sim: Sim) -> None:
        super().__init__(sim)
        cfg = sim.cfg
        self.rng = random.Random(f"assignor-net-{sim.seed}")
        self.processes = [Replica(sim, i, 1) for i in range(cfg.assignor_replicas)]
        self.incarnations = 1
        self.settings = AssignorClientSettings(
            tuple(f"assignor{i}:9092" for i in range(cfg.assignor_replicas)),
            timeout_ms=cfg.assignor_timeout_ms,
            attempts=3,
            backoff_ms=50,
            max_backoff_ms=1_000,
        )
        self.clients: list[RemoteAssignor] = []

    @property
    def replicas(self) -> list[Replica]:
        return self.processes

    def client(self, process_name: str, fallback: Any) -> RemoteAssignor:
        """A shard process's client: one call per replica over the simulated network."""
        calls = [self._caller(i) for i in range(len(self.replicas))]
        client = RemoteAssignor(
            self.settings,
            fallback,
            rng=random.Random(f"assignor-client-{self.sim.seed}-{process_name}"),
            calls=calls,
        )
        self.clients.append(client)
        return client

    def _caller(self, index: int) -> Any:
        async def call(raw: bytes, timeout: float) -> bytes:
            return await self.request(index, raw, timeout)

        return call

    async def request(self, index: int, raw: bytes, timeout: float) -> bytes:
        """One Assign call from a shard (this runs in the shard's context) to replica
        ``index``: the answer's bytes, or ``AioRpcError`` as gRPC raises it."""
        out: bytes = await self.call(
            lambda: self.replicas[index],
            lambda replica: self.sim.spawn(self._serve(replica, raw), replica.ctx.copy()),
            timeout,
            resets=True,
        )
        return out

    async def _serve(self, replica: Replica, raw: bytes) -> bytes:
        """The replica's side: its compute time, now and then overloaded, else the real
        servicer's answer (or its status)."""
        cfg = self.sim.cfg
        rng = replica.rng
        slow = rng.random() < cfg.assignor_slow
        delay_ms = rng.uniform(500, 3_000) if slow else rng.uniform(1, 50)
        overloaded = rng.random() < cfg.assignor_overload
        await asyncio.sleep(delay_ms / 1000)
        if overloaded:
            self.sim.coverage.hit("assignor_service", "replica overloaded")
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, "overloaded")
        out = await replica.service.assign(raw, _Context())
        self.sim.coverage.hit("assignor_service", "replica answered")
        return out

    # ---- faults (sim.processes) ---------------------------------------------------------
    def make(self, index: int, incarnation: int) -> Replica:
        return Replica(self.sim, index, incarnation)

    def died(self, replica: Replica) -> None:
        replica.dead.set_result(None)  # its connections reset
        replica.service.close()

    def count(self) -> None:
        """The clients' counters (calls, remote answers, retries, failures per status,
        fallbacks per reason) into the coverage, once, at the end of the run."""
        for client in self.clients:
            for what, n in client.stats.items():
                self.sim.coverage.hit("assignor_service", f"client {what}", n)
