"""A named security document followed by a process: read at start, polled for new versions,
changed by compare-and-set (re-planned when another writer got there first)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from shards.storage.base import LogStore
from shards.tasks import cancel_and_wait

log = logging.getLogger("groupcoord.security")


class Versioned(Protocol):
    @property
    def version(self) -> int: ...


_D = TypeVar("_D", bound=Versioned)


class WatchedDocument(Generic[_D]):
    def __init__(
        self,
        store: LogStore,
        name: str,
        decode: Callable[[int, bytes], _D],
        encode: Callable[[_D], bytes],
        poll_interval_ms: int = 1000,
    ) -> None:
        self.store = store
        self.name = name
        self.decode = decode
        self.encode = encode
        self.poll_interval = poll_interval_ms / 1000
        self.current: _D = decode(0, b"")
        self._watcher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.refresh()
        self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def close(self) -> None:
        watcher, self._watcher = self._watcher, None
        await cancel_and_wait(watcher)

    async def refresh(self) -> _D:
        doc = await self.store.read_document(self.name)
        if doc.version > self.current.version:
            self.current = self.decode(doc.version, doc.data)
        return self.current

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval)
            try:
                await self.refresh()
            except Exception as ex:  # an undecodable document or an outage: keep the last
                log.warning("%s poll failed: %r", self.name, ex)

    async def update(self, change: Callable[[_D], _D | None]) -> _D:
        """Apply ``change`` to the current document (None: nothing to write) and write it
        unless another writer changed it meanwhile, in which case apply it again."""
        while True:
            doc = await self.store.read_document(self.name)
            current = self.decode(doc.version, doc.data)
            changed = change(current)
            if changed is None:
                self.current = current
                return current
            version = await self.store.write_document(self.name, doc.version, self.encode(changed))
            if version is not None:
                self.current = self.decode(version, self.encode(changed))
                return self.current
