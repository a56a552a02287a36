"""A part of the simulated world made of a few processes of one kind -- the assignor
service's replicas, the gateways -- with their faults: killed (kill -9) and restarted as a
new incarnation a while later, paused (SIGSTOP) and resumed, and all running again when the
faults stop. A process here is any object with ``name`` and ``alive`` whose code runs in a
context naming it (:data:`sim.loop.PROCESS`), so that the loop can hold it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

if TYPE_CHECKING:
    import random

    from sim.world import Sim


@dataclass(frozen=True, slots=True)
class Hop:
    """How one kind of call to these processes shows in the trace (``{callee}``,
    ``{what}`` filled in) and in their coverage area."""

    request_lost: str
    answer_lost: str
    refused: str
    lost: str
    answer_lost_key: str
    reset: str
    deadline: str


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def retrieve_quietly(task: asyncio.Task[Any]) -> None:
    """A done callback: the task's error, if any, is nobody's to handle (an answer that
    came after its caller gave up), so it is not reported as never retrieved."""
    if not task.cancelled():
        task.exception()


class Processes:
    #: the coverage area of their faults, and what its keys call one of them ("replica ")
    area = ""
    label = ""

    #: what a call to one of them is called in the trace and coverage (``call``)
    hop: Hop

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        #: the network's randomness on the calls to them
        self.rng: random.Random
        self.processes: list[Any] = []
        #: incarnations started so far (each gets the next number in its name)
        self.incarnations = 0

    def lossy(self) -> bool:
        return self.rng.random() < self.sim.cfg.loss and not self.sim.faults_over

    async def call(
        self,
        callee: Callable[[], Any | None],
        serve: Callable[[Any], asyncio.Task[Any]],
        timeout: float,
        what: str = "",
        refused: str = "connection refused",
        resets: bool = False,
    ) -> Any:
        """One gRPC call over the simulated network (this runs in the caller's context): a
        delay; then ``callee()``, the process at the address (None: nobody), answers
        ``UNAVAILABLE`` if dead; the request lost now and then; ``serve(callee)`` starts the
        callee's side in its process; a delay; the answer lost now and then.
        ``DEADLINE_EXCEEDED`` when ``timeout`` passes. ``resets``: the callee's death (its
        ``dead`` future) fails the call ``UNAVAILABLE`` at once (its connections reset). The
        answer, or ``AioRpcError`` as gRPC raises it."""
        sim, hop, area = self.sim, self.hop, self.area
        lo, hi = sim.cfg.net_delay_ms
        try:
            async with asyncio.timeout(timeout):
                await asyncio.sleep(self.rng.uniform(lo, hi) / 1000)
                p = callee()
                if p is None or not p.alive:
                    sim.coverage.hit(area, hop.refused)
                    raise rpc_error(grpc.StatusCode.UNAVAILABLE, refused)
                if self.lossy():
                    sim.trace(hop.request_lost.format(callee=p.name, what=what))
                    sim.coverage.hit(area, hop.lost)
                    await sim.loop.create_future()
                answer = serve(p)
                # (it can end after its caller gave up: its error is nobody's to handle)
                answer.add_done_callback(retrieve_quietly)
                if not resets:
                    out = await asyncio.shield(answer)
                else:
                    done, _ = await asyncio.wait(
                        {answer, p.dead}, return_when=asyncio.FIRST_COMPLETED
                    )
                    if answer not in done:
                        sim.coverage.hit(area, hop.reset)
                        raise rpc_error(grpc.StatusCode.UNAVAILABLE, "connection reset")
                    out = answer.result()
                await asyncio.sleep(self.rng.uniform(lo, hi) / 1000)
                if self.lossy():
                    sim.trace(hop.answer_lost.format(callee=p.name, what=what))
                    sim.coverage.hit(area, hop.answer_lost_key)
                    await sim.loop.create_future()
                return out
        except TimeoutError:
            sim.coverage.hit(area, hop.deadline)
            raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None

    def make(self, index: int, incarnation: int) -> Any:
        """A new incarnation of process ``index``."""
        raise NotImplementedError

    def died(self, process: Any) -> None:
        """What the death of ``process`` does to the world (beyond holding its code)."""

    async def kill(self, index: int, down_ms: int) -> None:
        """kill -9 of process ``index``; a new incarnation starts ``down_ms`` later."""
        sim = self.sim
        p = self.processes[index]
        if not p.alive:
            return
        sim.trace(f"{p.name} killed")
        sim.coverage.hit(self.area, f"{self.label}killed")
        p.alive = False
        sim.loop.kill(p)
        self.died(p)
        await asyncio.sleep(down_ms / 1000)
        self.restart(index)

    def restart(self, index: int) -> None:
        if self.processes[index].alive:
            return
        self.incarnations += 1
        p = self.processes[index] = self.make(index, self.incarnations)
        self.sim.trace(f"{p.name} started")

    async def pause(self, index: int, ms: int) -> None:
        """SIGSTOP of process ``index`` for ``ms``, then SIGCONT."""
        sim = self.sim
        p = self.processes[index]
        if not p.alive or p in sim.loop.paused:
            return
        sim.trace(f"{p.name} paused for {ms} ms")
        sim.coverage.hit(self.area, f"{self.label}paused")
        sim.loop.pause(p)
        await asyncio.sleep(ms / 1000)
        self.resume(p)

    def resume(self, p: Any) -> None:
        if p.alive and p in self.sim.loop.paused:
            self.sim.trace(f"{p.name} resumed")
            self.sim.loop.resume(p)

    def heal(self) -> None:
        """The faults are over: every process runs (the paused resume, the dead restart)."""
        for i, p in enumerate(self.processes):
            self.resume(p)
            self.restart(i)
