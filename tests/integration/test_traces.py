"""One Kafka request is one trace across three real processes.

A separate ``groupcoord gateway``, ``groupcoord dev`` (the shard) and ``groupcoord assignor``
all export over OTLP to a real OTLP/gRPC receiver (``tests/support/otlp.py``). One
ConsumerGroupHeartbeat joins a member to a group through the gateway; the shard computes the
group's target assignment on the assignor process (inline assignment disabled). The spans of
the three processes must form one tree:

    gateway   kafka.ConsumerGroupHeartbeat (SERVER, root)
    gateway     /groupcoord.v1.GroupCoordinator/ConsumerGroupHeartbeat (CLIENT)
    shard         /groupcoord.v1.GroupCoordinator/ConsumerGroupHeartbeat (SERVER)
    shard           partition.append
    shard           assignor.assign
    shard             /groupcoord.v1.Assignor/Assign (CLIENT)
    assignor            /groupcoord.v1.Assignor/Assign (SERVER)

and the log lines each process writes for that request carry the trace id (and the id of
the span they were written in).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.kafka_wire import KafkaWire, request
from tests.support.offsets import ensure_topic
from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.processes import ServerProcess, gateway_process, wait_until

HEARTBEAT_RPC = "/groupcoord.v1.GroupCoordinator/ConsumerGroupHeartbeat"
ASSIGN_RPC = "/groupcoord.v1.Assignor/Assign"

#: export batches every 100 ms rather than every 5 s
ENV = {"OTEL_BSP_SCHEDULE_DELAY": "100", "GROUPCOORD_LOG_FORMAT": "json"}


def log_records(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


async def join(port: int, group: str, topic: str) -> Any:
    wire = await KafkaWire.connect("127.0.0.1", port, "traced-client")
    try:
        return await wire.send(
            request(
                "consumer_group_heartbeat",
                0,
                group_id=group,
                member_id=uuid.uuid4().hex[:22],
                member_epoch=0,
                rebalance_timeout=60_000,
                subscribed_topic_names=[topic],
                server_assignor="uniform",
                topic_partitions=[],
            )
        )
    finally:
        await wire.close()


def one(spans: list[ReceivedSpan], **match: Any) -> ReceivedSpan:
    found = [s for s in spans if all(getattr(s, k) == v for k, v in match.items())]
    assert len(found) == 1, (match, [(s.service, s.name, s.kind) for s in spans])
    return found[0]


@pytest.mark.slow
def test_a_kafka_request_is_one_trace_across_gateway_shard_and_assignor(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        otlp = ["--otlp-endpoint", receiver.endpoint, "--log-level", "DEBUG"]
        assignor = ServerProcess(
            ["assignor", "--grpc-port", "0", *otlp], tmp_path / "assignor.log", env=ENV
        )
        shard = gateway = None
        try:
            shard = ServerProcess.dev(
                tmp_path,
                "--num-partitions",
                "4",
                "--assignor-addresses",
                assignor.grpc_address,
                # every target assignment goes to the assignor service, none inline
                "--set",
                "consumer_group_inline_assignment_max_size=0",
                *otlp,
                log_name="shard.log",
                env=ENV,
            )
            gateway = gateway_process(
                shard.grpc_address, 4, tmp_path / "gateway.log", *otlp, env=ENV
            )
            topic, group = "traced-topic", f"traced-{uuid.uuid4().hex[:8]}"
            ensure_topic(shard.grpc_address, topic, 6)

            response = asyncio.run(join(gateway.ports["kafka"], group, topic))
            assert response.error_code == 0, response

            root = receiver.wait_for(
                lambda: [
                    s
                    for s in receiver.spans()
                    if s.service == "groupcoord-gateway"
                    and s.name == "kafka.ConsumerGroupHeartbeat"
                ]
            )[0]
            trace_id = root.trace_id
            # wait until every process has exported its part of the trace (each batches)
            expected_spans = {
                ("groupcoord-gateway", HEARTBEAT_RPC, "CLIENT"),
                ("groupcoord-shard", HEARTBEAT_RPC, "SERVER"),
                ("groupcoord-shard", "partition.append", "INTERNAL"),
                ("groupcoord-shard", "assignor.assign", "INTERNAL"),
                ("groupcoord-shard", ASSIGN_RPC, "CLIENT"),
                ("groupcoord-assignor", ASSIGN_RPC, "SERVER"),
            }
            receiver.wait_for(
                lambda: (
                    expected_spans
                    <= {(s.service, s.name, s.kind) for s in receiver.spans(trace_id)}
                )
            )
            spans = receiver.spans(trace_id)

            assert root.kind == "SERVER" and root.parent_span_id is None
            gw_client = one(spans, service="groupcoord-gateway", name=HEARTBEAT_RPC, kind="CLIENT")
            assert gw_client.parent_span_id == root.span_id
            shard_server = one(spans, service="groupcoord-shard", name=HEARTBEAT_RPC, kind="SERVER")
            assert shard_server.parent_span_id == gw_client.span_id  # across processes
            appends = [
                s for s in spans if s.service == "groupcoord-shard" and s.name == "partition.append"
            ]
            assert appends and all(a.parent_span_id == shard_server.span_id for a in appends)
            assert all(a.attributes["groupcoord.records"] >= 1 for a in appends)
            assign = one(spans, service="groupcoord-shard", name="assignor.assign")
            assert assign.parent_span_id == shard_server.span_id
            assert assign.attributes["groupcoord.group_id"] == group
            assert "groupcoord.fallback" not in assign.attributes  # the assignor answered
            assign_client = one(spans, service="groupcoord-shard", name=ASSIGN_RPC, kind="CLIENT")
            assert assign_client.parent_span_id == assign.span_id
            assign_server = one(
                spans, service="groupcoord-assignor", name=ASSIGN_RPC, kind="SERVER"
            )
            assert assign_server.parent_span_id == assign_client.span_id  # across processes
            # nothing of this request escaped into another trace
            assert not [
                s
                for s in receiver.spans()
                if s.trace_id != trace_id and s.name in (ASSIGN_RPC, "assignor.assign")
            ]

            # The log lines written for the request carry its trace id and their span's id.
            expected = {
                "gateway.log": root,
                "shard.log": shard_server,
                "assignor.log": assign_server,
            }

            def traced(name: str) -> list[dict[str, Any]]:
                return [r for r in log_records(tmp_path / name) if r.get("trace_id") == trace_id]

            for name, span in expected.items():
                wait_until(lambda name=name: traced(name), timeout=10)  # type: ignore[misc]
                lines = traced(name)
                assert any(r.get("span_id") == span.span_id for r in lines), (name, lines)
            shard_lines = traced("shard.log")
            assert any(r["msg"].startswith("ConsumerGroupHeartbeat from") for r in shard_lines), (
                shard_lines
            )
            assert any(group in r["msg"] for r in traced("assignor.log"))
            # a line logged outside any span has no trace id
            startup = [r for r in log_records(tmp_path / "shard.log") if "serving" in r["msg"]]
            assert startup and all("trace_id" not in r for r in startup)
        finally:
            for proc in (gateway, shard, assignor):
                if proc is not None:
                    proc.kill()
