"""What a gateway sharing the shard's process is given (services/shard/in_process.py): the
shard's addresses called in-process and its steady decisions, or less when the A/B switches
(``groupcoord dev --gateway-loopback``, ``--no-gateway-steady``) say so."""

from __future__ import annotations

from pathlib import Path

from services.shard.in_process import in_process_shard
from tests.support.gateway import gateway_stack


async def test_the_switches_undo_the_in_process_call_and_the_steady_shortcut(
    tmp_path: Path,
) -> None:
    async with gateway_stack(tmp_path) as stack:
        local, steady = in_process_shard(stack.shard)
        assert set(local) == {f"127.0.0.1:{stack.shard.port}"}
        assert steady is not None
        assert in_process_shard(stack.shard, loopback=True) == ({}, None)
        local, steady = in_process_shard(stack.shard, steady=False)
        assert set(local) == {f"127.0.0.1:{stack.shard.port}"} and steady is None
