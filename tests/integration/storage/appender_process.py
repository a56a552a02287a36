"""A separate process that owns one partition and appends until it is fenced or killed.

Run as ``python appender_process.py URL PARTITION OWNER`` (repository root on PYTHONPATH).
It prints one line per event and flushes each, so the parent knows exactly what was
acknowledged before it took over or killed us::

    epoch <epoch>
    ack <offset> <payload>
    fenced <current epoch>
"""

from __future__ import annotations

import asyncio
import sys

from shards.storage import FencedError, open_store


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(url: str, partition: int, owner: str) -> None:
    async with open_store(url) as store:
        epoch = await store.acquire(partition, owner, 60_000)
        say(f"epoch {epoch}")
        i = 0
        while True:
            payload = f"{owner}-{i}"
            try:
                offset = await store.append(partition, epoch, payload.encode())
            except FencedError as e:
                say(f"fenced {e.current_epoch}")
                return
            say(f"ack {offset} {payload}")
            i += 1


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
