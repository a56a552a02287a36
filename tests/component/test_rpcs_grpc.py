"""Every GroupCoordinator RPC of the proto answers on a real shard through the client's
method for it (no UNIMPLEMENTED, no transport error, a response of the RPC's type)."""

from __future__ import annotations

from typing import Any

import pytest
from groupcoord.v1 import groups_pb2, offsets_pb2

from services.client import CoordinatorClient, RetryPolicy
from services.rpc.rpcs import GROUP_COORDINATOR_SERVICE, request_class, snake_case
from tests.component.conftest import Client

GROUP = "rpcs-group"
POLICY = RetryPolicy(attempt_timeout_s=5, deadline_s=10)


async def _ask(client: CoordinatorClient, rpc: str) -> Any:
    method = getattr(client, snake_case(rpc))
    if rpc == "FindCoordinator":
        return await method(GROUP)
    if rpc == "OffsetFetch":
        return await method(offsets_pb2.OffsetFetchRequestGroup(group_id=GROUP))
    if rpc == "ListGroups":
        return await method(groups_pb2.ListGroupsRequest())
    if rpc in (
        "ConsumerGroupDescribe",
        "StreamsGroupDescribe",
        "DescribeGroups",
        "DeleteGroups",
        "DescribeGroupConfigs",
    ):
        return await method(GROUP)
    # the rest take a request with a group_id: an empty one is answered (mostly refused)
    return await method(
        request_class(GROUP_COORDINATOR_SERVICE.methods_by_name[rpc])(group_id=GROUP)
    )


@pytest.mark.parametrize("rpc", [r.name for r in GROUP_COORDINATOR_SERVICE.methods])
async def test_every_rpc_answers_through_the_client(client: Client, rpc: str) -> None:
    async with CoordinatorClient(f"127.0.0.1:{client.app.port}", POLICY) as c:
        answer = await _ask(c, rpc)
    assert answer is not None
    if rpc == "FindCoordinator":
        assert answer.address
