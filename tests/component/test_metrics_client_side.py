"""The shard's client-side assignor metrics (docs/observability.md): a real shard app with its
own meter provider, members using the Python helper; each counter's value is fixed by the
scenario: computations asked, installed, refused (INVALID_ASSIGNMENT), turns given up
(error, deadline, member left) and the server-side fallback."""

from __future__ import annotations

import asyncio
from pathlib import Path

from services.client import ClientSideAssignor, ClientSideMember, CoordinatorClient
from services.shard.app import ShardApp
from shards.core.errors import Errors
from tests.component.conftest import connect, create_topics, shard_settings
from tests.component.test_client_side_helper_errors import Gate, Raising, Twice
from tests.component.test_metrics import Metrics, _until
from tests.support.client_side import StripesAssignor
from tests.support.metrics import undocumented

GROUP = "metered-stripes"
NAMES = (
    "groupcoord_client_assignments_chosen_total",
    "groupcoord_client_assignments_installed_total",
    "groupcoord_client_assignments_rejected_total",
    "groupcoord_client_assignments_given_up_total",
    "groupcoord_client_assignment_fallbacks_total",
)


class Wrong(Twice):
    def metadata(self) -> tuple[int, bytes]:
        return 1, b"wrong"  # a change of declaration: a new target is needed


async def test_client_side_computations_are_counted(tmp_path: Path) -> None:
    metrics = Metrics()
    app = ShardApp(
        shard_settings(tmp_path, consumer_group_client_assignment_timeout_ms=1_000),
        meter_provider=metrics.provider,
    )
    await app.start()
    c = await connect(app)
    try:
        await create_topics(c, {"orders": 4})
        async with CoordinatorClient(f"127.0.0.1:{app.port}") as client:

            def member(member_id: str, assignor: ClientSideAssignor) -> ClientSideMember:
                return ClientSideMember(client, GROUP, ["orders"], [assignor], member_id=member_id)

            s = await metrics.ascrape()
            assert all(s.value(n) == 0 for n in NAMES)  # exposed from the start
            # m1 creates the group and computes epoch 2: asked 1, installed 1
            m1 = member("m1", StripesAssignor())
            await m1.heartbeat()
            assert m1.computation is not None and await m1.computation == 0
            # m0 joins and computes; its assignor raises (error=1): m1's turn, installed
            m0 = member("m0", Raising())
            await m0.heartbeat()
            assert m0.computation is not None and await m0.computation == 0
            await m1.heartbeat()
            assert await m1.computation == 0
            s = await metrics.ascrape()
            assert s.value("groupcoord_client_assignments_chosen_total") == 3
            assert s.value("groupcoord_client_assignments_installed_total") == 2
            assert s.value("groupcoord_client_assignments_given_up_total", reason="error") == 1
            # m0's assignor turns wrong: INVALID_ASSIGNMENT, handed over (error=1) to m1,
            # which does not compute in time (1 s): every member had its turn, fallback
            m0.assignors = [Wrong()]
            await m0.heartbeat()
            assert m0.computation is not None
            assert await m0.computation == Errors.INVALID_ASSIGNMENT
            s = await _until(
                metrics, lambda s: s.value("groupcoord_client_assignment_fallbacks_total") == 1
            )
            assert s.value("groupcoord_client_assignments_chosen_total") == 5
            assert s.value("groupcoord_client_assignments_rejected_total") == 1
            assert s.value("groupcoord_client_assignments_given_up_total", reason="error") == 2
            assert s.value("groupcoord_client_assignments_given_up_total", reason="deadline") == 1
            assert s.value("groupcoord_client_assignment_fallbacks_total") == 1
            assert s.value("groupcoord_client_assignments_installed_total") == 2
            # m2 joins and is chosen; it leaves while computing: m0 (first by id) is asked
            stuck = Gate()
            m2 = member("m2", stuck)
            await m2.heartbeat()
            await _wait(stuck)
            await m2.leave()
            stuck.gate.set()
            s = await metrics.ascrape()
            left = s.value("groupcoord_client_assignments_given_up_total", reason="member_left")
            assert left == 1
            # a member without client-side assignors joins while m0 is chosen: server-side
            plain = ClientSideMember(client, GROUP, ["orders"], [], member_id="m3")
            await plain.heartbeat()
            s = await metrics.ascrape()
            given_up = "groupcoord_client_assignments_given_up_total"
            assert s.value(given_up, reason="server_side") == 1
            assert s.value(given_up) == 5  # error 2, deadline 1, member_left 1, server_side 1
            assert s.value("groupcoord_client_assignments_chosen_total") == 7
            assert s.value("groupcoord_client_assignments_chosen_total") == 7
            # bounded labels only: no group or member ids
            for name in NAMES:
                for sample in s.find(name):
                    assert set(sample.labels) <= {"reason"}, sample
            assert undocumented(s) == set()
    finally:
        await c.channel.close()
        await app.stop()
        metrics.provider.shutdown()


async def _wait(gate: Gate) -> None:
    assert await asyncio.to_thread(gate.entered.wait, 10)
