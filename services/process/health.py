"""gRPC health that tells the truth: liveness and readiness, kept up to date by a watcher.

Contract (docs/observability.md, "Health and readiness"), the same in every process:

* :data:`LIVENESS` is SERVING as soon as the gRPC server runs and stays so until shutdown.
  It answers only when the process's event loop runs: a loop that is stuck answers nothing
  and the probe times out. Kubernetes liveness probes use it.
* ``""`` (the server as a whole) is the process's readiness: SERVING only while every
  readiness check of the process passes (a shard: it serves every partition it owns; a
  gateway: a shard is reachable). Kubernetes readiness probes use it.
* each service name (``groupcoord.v1.GroupCoordinator``, ``groupcoord.v1.TopicCatalog``,
  ``groupcoord.v1.Assignor``, ``groupcoord.Gateway``) follows the check of the part of the
  process that serves it.

A :class:`HealthWatcher` re-evaluates its checks every ``interval_s`` and sets the health
entries that changed, logging every transition with its reason (WARNING when a check fails,
INFO when it passes again), so that health follows partitions loading, failing and being
lost, and a gateway losing its shards, without anyone having to remember to call it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.process import channels
from services.process.tls import ClientTls
from shards.tasks import cancel_and_wait

log = logging.getLogger("groupcoord.health")

#: SERVING whenever the process's event loop runs (liveness); never held back by readiness
LIVENESS = "groupcoord.Liveness"
#: readiness of the whole process: every check passes
READINESS = ""

#: how often the watcher re-evaluates its checks
DEFAULT_INTERVAL_S = 0.25


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    #: why not (or what is served, when ready): goes into the transition's log line
    reason: str = ""
    #: what kind of "not ready" this is: a change of kind is logged even without a change
    #: of readiness (LOADING -> FAILED), a change of reason alone is not (partitions
    #: loading one by one). Default: the reason itself.
    kind: str | None = None
    #: how much is not ready (partitions not served): a rise is logged even within one
    #: kind (more partitions lost), a fall is not (they come back one by one)
    degree: int = 0

    @property
    def summary(self) -> str:
        return self.reason if self.kind is None else self.kind


Check = Callable[[], "Readiness | Awaitable[Readiness]"]


class HealthSetter(Protocol):
    async def set_serving(self, name: str, serving: bool) -> None: ...


@dataclass
class _Part:
    what: str
    names: tuple[str, ...]
    check: Check
    last: Readiness | None = None


class HealthWatcher:
    """Runs readiness checks and sets the health entries they govern (and ``""``, the
    conjunction of all of them) on ``server``."""

    def __init__(self, server: HealthSetter, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.server = server
        self.interval_s = interval_s
        self._parts: list[_Part] = []
        self._overall: bool | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # one evaluation at a time (the loop and start-up)

    def add(self, what: str, names: Sequence[str], check: Check) -> None:
        """``check`` (sync or async) governs ``names``; ``what`` names it in log lines."""
        self._parts.append(_Part(what, tuple(names), check))

    @property
    def ready(self) -> bool:
        return bool(self._overall)

    async def evaluate(self) -> bool:
        """Run every check once, set what changed; returns the overall readiness."""
        async with self._lock:
            return await self._evaluate()

    async def _evaluate(self) -> bool:
        for part in self._parts:
            try:
                result = part.check()
                if inspect.isawaitable(result):
                    result = await result
            except Exception as ex:  # a check that fails says "not ready", with why
                result = Readiness(False, f"readiness check failed: {ex!r}")
            assert isinstance(result, Readiness)
            if part.last is None or part.last.ready != result.ready:
                for name in part.names:
                    await self.server.set_serving(name, result.ready)
                if result.ready:
                    log.info("%s ready: %s", part.what, result.reason or "serving")
                elif part.last is not None:
                    log.warning("%s not ready: %s", part.what, result.reason)
                else:
                    log.info("%s not ready yet: %s", part.what, result.reason)
            elif not result.ready and (
                result.summary != part.last.summary or result.degree > part.last.degree
            ):
                log.warning("%s still not ready: %s", part.what, result.reason)
            part.last = result
        overall = all(p.last is not None and p.last.ready for p in self._parts)
        if overall != self._overall:
            await self.server.set_serving(READINESS, overall)
            if overall:
                log.info("ready: gRPC health SERVING")
            elif self._overall is not None:
                log.warning(
                    "not ready: gRPC health NOT_SERVING (%s)",
                    "; ".join(
                        f"{p.what}: {p.last.reason}"
                        for p in self._parts
                        if p.last is not None and not p.last.ready
                    ),
                )
            self._overall = overall
        return overall

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="health")

    async def _run(self) -> None:
        while True:
            await self.evaluate()
            await asyncio.sleep(self.interval_s)

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)


class PeerLiveness:
    """Whether at least one of ``targets`` (gRPC addresses of groupcoord processes) answers
    its :data:`LIVENESS` health check: the readiness check of a gateway (a shard reachable).
    The channels are the internal ones (bounded reconnect backoff), so a peer that comes
    back is seen within a few seconds."""

    def __init__(
        self, targets: Sequence[str], timeout_s: float = 1.0, tls: ClientTls | None = None
    ) -> None:
        self.targets = list(targets)
        self.tls = tls
        self.timeout_s = timeout_s
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _stub(self, target: str) -> health_pb2_grpc.HealthStub:
        channel = self._channels.get(target)
        if channel is None:
            channel = self._channels[target] = channels.open_channel(target, tls=self.tls)
        return health_pb2_grpc.HealthStub(channel)

    async def _alive(self, target: str) -> str | None:
        """None if alive, else why not."""
        try:
            reply = await self._stub(target).Check(
                health_pb2.HealthCheckRequest(service=LIVENESS), timeout=self.timeout_s
            )
        except grpc.aio.AioRpcError as ex:
            return f"{target}: {ex.code().name}"
        if reply.status != health_pb2.HealthCheckResponse.SERVING:
            return f"{target}: {health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}"
        return None

    async def __call__(self) -> Readiness:
        problems = await asyncio.gather(*(self._alive(t) for t in self.targets))
        reachable = [t for t, p in zip(self.targets, problems, strict=True) if p is None]
        if reachable:
            return Readiness(True, f"shard reachable at {reachable[0]}")
        return Readiness(False, "no shard reachable (" + ", ".join(str(p) for p in problems) + ")")

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()


async def probe(
    target: str, service: str = READINESS, timeout_s: float = 3.0, tls: ClientTls | None = None
) -> str:
    """One health check: the status name (``SERVING``, ``NOT_SERVING``, ``SERVICE_UNKNOWN``,
    ...) or, when the call fails, the gRPC status code's name prefixed ``RPC_``."""
    async with channels.open_channel(target, tls=tls) as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout_s
            )
        except grpc.aio.AioRpcError as ex:
            details = ex.details() or ""
            return f"RPC_{ex.code().name}" + (f" ({details})" if details else "")
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
