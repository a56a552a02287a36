"""Late commits: what a member owned at an epoch, committed at that epoch after its
assignment or epoch moved on -- the commit of an application thread sent after the consumer
(or the Streams client) gave partitions up or moved to a new epoch (``Sim.late_commits``)."""

from __future__ import annotations

import asyncio
from typing import Any


async def send_late_commits(
    member: Any, held: dict[str, tuple[int, ...]], epoch: int, delay: float, area: str
) -> None:
    """``held`` (what ``member`` owned at ``epoch``: topic ids or subtopologies -> partitions)
    committed at ``epoch`` ``delay`` s later: what it still owns in one commit (KIP-1251:
    accepted at the older epoch), what it gave up in another (refused: a zombie). ``member``
    has ``alive``, ``owned``, ``sim`` and ``commit(which, epoch, what)``; a timeout counts
    under ``area``."""
    await asyncio.sleep(delay)
    if not member.alive:
        return
    kept = {k: tuple(p for p in ps if p in member.owned.get(k, ())) for k, ps in held.items()}
    gone = {k: tuple(p for p in ps if p not in kept[k]) for k, ps in held.items()}
    for chosen in (kept, gone):
        if any(chosen.values()):
            try:
                await member.commit(chosen, epoch, "late commit")
            except TimeoutError:
                member.sim.coverage.hit(area, "timeout")
