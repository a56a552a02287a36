"""Do large requests stall other clients? (issue 36 item 9, docs/security.md#abuse-resistance)

One ``groupcoord dev`` process (SQLite, the default catalog bounds). A probe client sends a
small OffsetFetch (one group, one partition: through the gateway and the shard) every
``--interval-ms`` on its own Kafka connection and records each answer's latency while a
large request runs on another connection:

* ``create_topics``: 1,000 CreateTopics requests of one one-partition topic each, pipelined on
  one connection, while 310 consumer groups subscribe by regex (``r-.*``): every new topic
  re-evaluates the regex groups;
* ``offset_commit``: one OffsetCommit of 99,000 partitions (10 topics of 9,900, every
  partition of the ``big-*`` topics; 99,010 items with the topics) over the Kafka protocol;
* ``offset_commit_grpc``: the same, of another group, over gRPC;
* ``metadata``: one Metadata of every topic: the whole catalog, 100,000 partitions.

The attack's requests are encoded before the probe starts and its answers are read as bytes
(decoded once it is over), so the benchmark's own loop does not delay the probe.
``--only NAME`` (repeatable) runs some scenarios; ``--py-spy FILE`` profiles the server
meanwhile (raw stacks, or speedscope's ordered samples for a ``.json`` file).
Reported per scenario: the probe's p50/p99/max in milliseconds and the attack's duration.
``--before RESULT.json``: an earlier result kept in this one under ``before``.

    .venv/bin/python -m bench.big_request_stall [--before RESULT.json]

Results: bench/results/big_request_stall.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
from groupcoord.v1 import offsets_pb2

from bench import report
from tests.support.kafka_wire import KafkaWire, decode_response, encode_request, request
from tests.support.processes import ServerProcess

REGEX_GROUPS = 310
SMALL_TOPICS = 1_000
BIG_TOPICS = 10
BIG_PARTITIONS = 9_900  # 1,000 + 10 x 9,900 = the catalog's 100,000


def _create(names: list[str], partitions: int) -> Any:
    return request(
        "create_topics",
        7,
        topics=[{"name": n, "num_partitions": partitions, "replication_factor": 1} for n in names],
        timeout=60_000,
    )


def _probe_request() -> Any:
    return request(
        "offset_fetch",
        8,
        groups=[{"group_id": "probe", "topics": [{"name": "r-0", "partition_indexes": [0]}]}],
    )


async def _send_raw(w: KafkaWire, frames: list[tuple[Any, bytes]]) -> list[bytes]:
    """Write the pre-encoded requests at once; the answers as raw frames, in order."""
    w.writer.write(b"".join(f for _, f in frames))
    await w.writer.drain()
    return [await w.read_frame() for _ in frames]


async def _regex_groups(port: int) -> None:
    w = await KafkaWire.connect("127.0.0.1", port)
    try:
        for i in range(REGEX_GROUPS):
            r = await w.send(
                request(
                    "consumer_group_heartbeat",
                    1,
                    group_id=f"rg-{i}",
                    member_id=str(uuid.uuid4()),
                    member_epoch=0,
                    rebalance_timeout=300_000,
                    subscribed_topic_regex="r-.*",
                    topic_partitions=[],
                )
            )
            assert r.error_code == 0, r
    finally:
        await w.close()


#: an attack: runs, then returns how to count what it got -- (requests, answer bytes, error
#: codes) -- which is done once the probe has stopped (decoding a 100,000-partition answer
#: here would hold the benchmark's loop, and the probe's latency with it)
Attack = Callable[[], Awaitable[Callable[[], tuple[int, int, dict[str, int]]]]]


def _kafka_attack(port: int, requests: list[Any]) -> Attack:
    """Send the (pre-encoded) requests on one connection."""
    frames = [(r, encode_request(r, i + 1, "big")) for i, r in enumerate(requests)]

    async def attack() -> Callable[[], tuple[int, int, dict[str, int]]]:
        w = await KafkaWire.connect("127.0.0.1", port, client_id="big")
        try:
            answers = await _send_raw(w, frames)
        finally:
            await w.close()

        def count() -> tuple[int, int, dict[str, int]]:
            errors: dict[str, int] = {}
            for (r, _), payload in zip(frames, answers, strict=True):
                _, body = decode_response(r, payload)
                for code in _codes(body):
                    errors[str(code)] = errors.get(str(code), 0) + 1
            return len(frames), sum(len(a) for a in answers), errors

        return count

    return attack


def _grpc_attack(grpc_port: int, request: offsets_pb2.OffsetCommitRequest) -> Attack:
    """One OffsetCommit over gRPC (serialized beforehand)."""
    data = request.SerializeToString()

    async def attack() -> Callable[[], tuple[int, int, dict[str, int]]]:
        options = [("grpc.max_receive_message_length", 1 << 30)]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}", options=options) as ch:
            answer = await ch.unary_unary("/groupcoord.v1.GroupCoordinator/OffsetCommit")(data)

        def count() -> tuple[int, int, dict[str, int]]:
            body = offsets_pb2.OffsetCommitResponse.FromString(answer)
            errors: dict[str, int] = {}
            for t in body.topics:
                for p in t.partitions:
                    errors[str(p.error_code)] = errors.get(str(p.error_code), 0) + 1
            return 1, len(answer), errors

        return count

    return attack


async def _scenario(port: int, attack: Attack, interval_s: float) -> dict[str, Any]:
    probe = await KafkaWire.connect("127.0.0.1", port, client_id="probe")
    latencies: list[float] = []
    try:
        for _ in range(20):  # warm-up
            await probe.send(_probe_request())
        started = time.perf_counter()
        running = asyncio.ensure_future(attack())
        while not running.done():
            t = time.perf_counter()
            await probe.send(_probe_request(), timeout=120)
            latencies.append((time.perf_counter() - t) * 1000)
            await asyncio.sleep(interval_s)
        count = await running
        took = time.perf_counter() - started
    finally:
        await probe.close()
    requests, answer_bytes, errors = count()
    return {
        **report.probe_summary(latencies),
        "attack_s": round(took, 2),
        "attack_requests": requests,
        "answer_bytes": answer_bytes,
        "error_codes": errors,
    }


def _codes(body: Any) -> list[int]:
    """Every error code in an answer (CreateTopics' topics, OffsetCommit's partitions,
    Metadata's topics)."""
    out = []
    for t in getattr(body, "topics", ()):
        if hasattr(t, "partitions") and t.partitions and hasattr(t.partitions[0], "error_code"):
            out += [p.error_code for p in t.partitions]
        elif hasattr(t, "error_code"):
            out.append(t.error_code)
    return out


def _scenarios(kafka_port: int, grpc_port: int) -> dict[str, Callable[[], Attack]]:
    """Name -> how to make its attack (built before the probe starts)."""
    big = [f"big-{i}" for i in range(BIG_TOPICS)]
    return {
        "create_topics": lambda: _kafka_attack(
            kafka_port, [_create([f"r-{i}"], 1) for i in range(SMALL_TOPICS)]
        ),
        "offset_commit": lambda: _kafka_attack(
            kafka_port,
            [
                request(
                    "offset_commit",
                    9,
                    group_id="committer",
                    generation_id_or_member_epoch=-1,
                    member_id="",
                    topics=[
                        {
                            "name": n,
                            "partitions": [
                                {"partition_index": p, "committed_offset": 1000 + p}
                                for p in range(BIG_PARTITIONS)
                            ],
                        }
                        for n in big
                    ],
                )
            ],
        ),
        "offset_commit_grpc": lambda: _grpc_attack(
            grpc_port,
            offsets_pb2.OffsetCommitRequest(
                group_id="committer-grpc",
                topics=[
                    offsets_pb2.OffsetCommitRequestTopic(
                        name=n,
                        partitions=[
                            offsets_pb2.OffsetCommitRequestPartition(
                                partition_index=p, committed_offset=1000 + p
                            )
                            for p in range(BIG_PARTITIONS)
                        ],
                    )
                    for n in big
                ],
            ),
        ),
        "metadata": lambda: _kafka_attack(kafka_port, [request("metadata", 12, topics=None)]),
    }


SCENARIOS = ["create_topics", "offset_commit", "offset_commit_grpc", "metadata"]


async def _run(port: int, grpc_port: int, interval_s: float, only: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    await _regex_groups(port)
    big_created = False
    for name, make in _scenarios(port, grpc_port).items():
        if only and name not in only:
            continue
        if name != "create_topics" and not big_created:
            big_created = True
            w = await KafkaWire.connect("127.0.0.1", port)
            for i in range(BIG_TOPICS):  # at most 10,000 partitions per CreateTopics
                r = await w.send(_create([f"big-{i}"], BIG_PARTITIONS))
                assert all(t.error_code == 0 for t in r.topics), r
            await w.close()
        out[name] = r = await _scenario(port, make(), interval_s)
        print(
            f"{name:14} probe p50 {r['probe_p50_ms']:8.2f} ms  p99 {r['probe_p99_ms']:8.2f} ms"
            f"  max {r['probe_max_ms']:8.2f} ms  ({r['attack_requests']} requests in "
            f"{r['attack_s']} s, codes {r['error_codes'] if len(r['error_codes']) < 5 else '…'})"
        )
    return out


def run(interval_s: float, only: list[str], py_spy: str | None = None) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory() as tmp,
        ServerProcess.dev(Path(tmp) / "dev", "--log-level", "WARNING") as dev,
    ):
        spy = None
        if py_spy:
            fmt = "speedscope" if py_spy.endswith(".json") else "raw"  # speedscope: in order
            cmd = [".venv/bin/py-spy", "record", "--format", fmt, "-o", py_spy, "--pid"]
            spy = subprocess.Popen([*cmd, str(dev.proc.pid)])
        try:
            return asyncio.run(_run(dev.ports["kafka"], dev.ports["grpc"], interval_s, only))
        finally:
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval-ms", type=float, default=10.0, help="between probe requests")
    parser.add_argument("--out", default="bench/results/big_request_stall.json")
    parser.add_argument("--before", help="an earlier result, kept under 'before'")
    parser.add_argument("--only", action="append", default=[], choices=SCENARIOS)
    parser.add_argument(
        "--py-spy", help="profile the server with py-spy into this file (.json: speedscope)"
    )
    args = parser.parse_args()
    doc: dict[str, Any] = {
        "when": report.utc_now(),
        "command": report.command("bench.big_request_stall"),
        "machine": report.machine(loadavg=True),
        "scenarios": run(args.interval_ms / 1000, args.only, args.py_spy),
    }
    if args.before:
        doc["before"] = json.loads(Path(args.before).read_text())
    report.write(args.out, doc, newline=True)


if __name__ == "__main__":
    main()
