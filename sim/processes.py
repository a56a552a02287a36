"""A part of the simulated world made of a few processes of one kind -- the assignor
service's replicas, the gateways -- with their faults: killed (kill -9) and restarted as a
new incarnation a while later, paused (SIGSTOP) and resumed, and all running again when the
faults stop. A process here is any object with ``name`` and ``alive`` whose code runs in a
context naming it (:data:`sim.loop.PROCESS`), so that the loop can hold it."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.world import Sim


class Processes:
    #: the coverage area of their faults, and what its keys call one of them ("replica ")
    area = ""
    label = ""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.processes: list[Any] = []
        #: incarnations started so far (each gets the next number in its name)
        self.incarnations = 0

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
