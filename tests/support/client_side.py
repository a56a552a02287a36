"""A custom client-side assignor for tests and the docs' example, and a member process that
runs it with the Python helper (``python -m tests.support.client_side ...``): it prints one
JSON line per event (``computing``, ``state``) so that a test can follow and kill it."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Mapping

from services.client import ClientSideMember, CoordinatorClient, GroupSpec, MemberAssignment

NAME = "stripes"


class StripesAssignor:
    """Custom: each member gets a contiguous stripe of every topic it subscribes to, members
    in id order; its metadata says how many partitions it got. ``delay_s``: a slow assignor."""

    name = NAME
    minimum_version = 0
    maximum_version = 1

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s

    def metadata(self) -> tuple[int, bytes]:
        return 1, b"stripes-v1"

    def assign(self, spec: GroupSpec) -> Mapping[str, MemberAssignment]:
        if self.delay_s:
            time.sleep(self.delay_s)
        plan: dict[str, dict[str, tuple[int, ...]]] = {m: {} for m in spec.members}
        for topic in spec.topics.values():
            takers = sorted(
                m.member_id
                for m in spec.members.values()
                if topic.topic_id in m.subscribed_topic_ids
            )
            for i, member_id in enumerate(takers):
                start = topic.num_partitions * i // len(takers)
                end = topic.num_partitions * (i + 1) // len(takers)
                if end > start:
                    plan[member_id][topic.topic_id] = tuple(range(start, end))
        return {
            m: MemberAssignment(parts, 1, str(sum(len(p) for p in parts.values())).encode())
            for m, parts in plan.items()
        }


def _emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


async def _main(args: argparse.Namespace) -> None:
    async with CoordinatorClient(args.bootstrap) as client:

        def state(m: ClientSideMember) -> None:
            meta = m.assignment_metadata
            _emit(
                event="state",
                member=m.member_id,
                epoch=m.epoch,
                owned={t: list(ps) for t, ps in m.owned.items()},
                metadata=None if meta is None else [meta[0], meta[1].decode()],
            )

        member = ClientSideMember(
            client,
            args.group,
            args.topic,
            [StripesAssignor(args.delay)],
            member_id=args.member_id,
            on_change=state,
            on_compute=lambda spec: _emit(
                event="computing", member=args.member_id, epoch=spec.group_epoch
            ),
        )
        stop = asyncio.Event()
        asyncio.get_running_loop().add_reader(sys.stdin.fileno(), stop.set)  # EOF/line: stop
        await member.run(stop)
        _emit(event="left", member=args.member_id)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", action="append", required=True)
    parser.add_argument("--member-id", required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    asyncio.run(_main(parser.parse_args()))
