"""KIP-848 client-side assignors through a real gRPC server: three members using the Python
helper (services.client.ClientSideMember) and a custom assignor converge; the RPCs' errors as
gRPC callers see them."""

from __future__ import annotations

from pathlib import Path

from groupcoord.v1 import consumer_group_pb2

from services.client import ClientSideMember, CoordinatorClient
from services.shard.app import ShardApp
from shards.core.errors import Errors
from tests.component.conftest import connect, create_topics, shard_settings
from tests.support.client_side import NAME, StripesAssignor

GROUP = "stripes-app"


async def test_three_helper_members_converge_with_a_custom_assignor(tmp_path: Path) -> None:
    app = ShardApp(shard_settings(tmp_path))
    await app.start()
    c = await connect(app)
    try:
        await create_topics(c, {"orders": 9})
        async with CoordinatorClient(f"127.0.0.1:{app.port}") as client:
            members = [
                ClientSideMember(client, GROUP, ["orders"], [StripesAssignor()], member_id=f"m{i}")
                for i in range(3)
            ]
            described = None
            for _ in range(40):
                for m in members:
                    await m.heartbeat()
                    if m.computation is not None:
                        await m.computation  # let a chosen member finish before the next round
                described = (
                    await c.coordinator.ConsumerGroupDescribe(
                        consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=[GROUP])
                    )
                ).groups[0]
                if described.group_state == "Stable" and all(
                    m.epoch == described.group_epoch for m in members
                ):
                    break
            assert described is not None and described.group_state == "Stable", described
            assert described.assignor_name == NAME
            owned = sorted(p for m in members for ps in m.owned.values() for p in ps)
            assert owned == list(range(9))
            # stripes in member id order, each with the assignor's metadata
            assert [sorted(p for ps in m.owned.values() for p in ps) for m in members] == [
                [0, 1, 2],
                [3, 4, 5],
                [6, 7, 8],
            ]
            assert all(m.assignment_metadata == (1, b"3") for m in members)
            assert sum(m.computations for m in members) >= 1

            # the errors, in KIP-848's order, as a gRPC caller sees them
            async def prepare(group_id: str, member_id: str, epoch: int) -> int:
                r = await c.coordinator.ConsumerGroupPrepareAssignment(
                    consumer_group_pb2.ConsumerGroupPrepareAssignmentRequest(
                        group_id=group_id, member_id=member_id, member_epoch=epoch
                    )
                )
                return int(r.error_code)

            epoch = members[0].epoch
            assert await prepare("nope", "m0", epoch) == Errors.GROUP_ID_NOT_FOUND
            assert await prepare(GROUP, "zz", epoch) == Errors.UNKNOWN_MEMBER_ID
            assert await prepare(GROUP, "m0", epoch + 5) == Errors.STALE_MEMBER_EPOCH
            assert await prepare(GROUP, "m0", epoch) == Errors.UNKNOWN_MEMBER_ID  # not chosen

            # a change of a member's metadata asks for a new assignment; an invalid install
            # is refused with INVALID_ASSIGNMENT and changes nothing
            class Greedy(StripesAssignor):
                def metadata(self) -> tuple[int, bytes]:
                    return 1, b"greedy"

                def assign(self, spec):  # type: ignore[no-untyped-def]
                    plan = super().assign(spec)
                    first = min(plan)
                    return {m: plan[first] for m in plan}  # everything twice

            members[1].assignors = [Greedy()]
            await members[1].heartbeat()
            chosen = next(m for m in members if m.member_id == "m1")
            assert chosen.computation is not None
            assert await chosen.computation == Errors.INVALID_ASSIGNMENT
            members[1].assignors = [StripesAssignor()]
            for _ in range(30):
                for m in members:
                    await m.heartbeat()
                    if m.computation is not None:
                        await m.computation
            owned = sorted(p for m in members for ps in m.owned.values() for p in ps)
            assert owned == list(range(9))
    finally:
        await c.channel.close()
        await app.stop()
