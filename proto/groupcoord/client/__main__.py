"""``python -m groupcoord.client --bootstrap HOST:PORT --group G (--topics A,B | --pattern RE)``

A member that prints what happens to it as JSON lines on stdout -- ``{"event": "assigned" |
"revoked" | "lost" | "joined" | "left", "partitions": [[topic, partition], ...], "epoch": N,
"member_id": ..., "ms": wall-clock ms}`` -- and leaves the group at end of input (stdin) or
on SIGTERM/SIGINT. The Go and Java examples print the same lines, so one checker reads
members of all three languages in one group (tests/interop/test_member_libraries.py).
``--commit`` commits offset 1 for each partition as it is assigned; ``--revoke-delay-ms``
makes each revocation take that long (to test what a slow callback does).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time

from groupcoord.client import ClientTls, GroupError, GroupMember, Partitions


def emit(
    event: str, member: GroupMember, partitions: Partitions = frozenset(), **extra: object
) -> None:
    line = {
        "event": event,
        "partitions": sorted([tp.topic, tp.partition] for tp in partitions),
        "epoch": member.epoch,
        "member_id": member.member_id,
        "ms": int(time.time() * 1000),
        **extra,
    }
    print(json.dumps(line), flush=True)


class Printer:
    def __init__(self, commit: bool, revoke_delay_s: float) -> None:
        self.member: GroupMember | None = None
        self.commit = commit
        self.revoke_delay_s = revoke_delay_s

    async def on_assigned(self, partitions: Partitions) -> None:
        assert self.member is not None
        emit("assigned", self.member, partitions)
        if self.commit:
            # (the commit needs the heartbeat loop: not awaited inside the callback)
            asyncio.get_running_loop().create_task(self._commit(partitions))

    async def _commit(self, partitions: Partitions) -> None:
        assert self.member is not None
        errors = await self.member.commit({tp: 1 for tp in partitions})
        emit(
            "committed",
            self.member,
            frozenset(tp for tp, e in errors.items() if not e),
            errors=sorted([tp.topic, tp.partition, e] for tp, e in errors.items() if e),
        )

    async def on_revoked(self, partitions: Partitions) -> None:
        assert self.member is not None
        if self.revoke_delay_s:
            await asyncio.sleep(self.revoke_delay_s)
        emit("revoked", self.member, partitions)

    async def on_lost(self, partitions: Partitions) -> None:
        assert self.member is not None
        emit("lost", self.member, partitions)


async def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m groupcoord.client", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--bootstrap", required=True, help="gRPC address(es) of any shard, comma-separated"
    )
    p.add_argument("--group", required=True)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topics", help="comma-separated topic names")
    which.add_argument("--pattern", help="a broker-side RE2 regex")
    p.add_argument("--instance-id")
    p.add_argument("--rack")
    p.add_argument("--member-id")
    p.add_argument("--commit", action="store_true")
    p.add_argument("--revoke-delay-ms", type=int, default=0)
    p.add_argument("--tls-cafile")
    p.add_argument("--tls-certfile")
    p.add_argument("--tls-keyfile")
    args = p.parse_args(argv)
    tls = None
    if args.tls_cafile or args.tls_certfile:
        tls = ClientTls(args.tls_cafile, args.tls_certfile, args.tls_keyfile)
    printer = Printer(args.commit, args.revoke_delay_ms / 1000)
    member = GroupMember(
        args.bootstrap.split(","),
        args.group,
        topics=args.topics.split(",") if args.topics else None,
        pattern=args.pattern,
        listener=printer,
        rack_id=args.rack,
        instance_id=args.instance_id,
        member_id=args.member_id,
        tls=tls,
    )
    printer.member = member
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_reader(sys.stdin.fileno(), lambda: None if sys.stdin.readline() else stop.set())
    try:
        await member.start()
    except (GroupError, TimeoutError) as ex:
        print(f"groupcoord.client: could not join: {ex}", file=sys.stderr)
        await member.close()
        return 1
    emit("joined", member)
    await stop.wait()
    await member.close()
    emit("left", member)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
