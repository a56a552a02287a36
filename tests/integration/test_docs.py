"""The documentation's examples, run for real: the README's grpcurl calls against a
``groupcoord dev`` process, and docs/multi-shard.md's single-machine recipe (Redis, assignor
replicas, shards, gateway) with free ports instead of its fixed ones. Links stay inside the
repository."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pool, json_format, message_factory
from google.protobuf.message import Message
from groupcoord.v1 import catalog_pb2, coordinator_pb2  # noqa: F401 - registers the services

from tests.support.kafka_wire import KafkaWire, request
from tests.support.processes import ROOT, ServerProcess
from tests.support.redis_server import free_port

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"```(?:sh|bash)?\n(.*?)```", text, flags=re.S)


def _commands(block: str) -> list[str]:
    """One string per command: continuation lines joined, comments and blanks dropped."""
    joined = block.replace("\\\n", " ")
    return [c.strip() for c in joined.splitlines() if c.strip() and not c.startswith("#")]


# ---- links ------------------------------------------------------------------------------
@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_links_stay_in_the_repository(doc: Path) -> None:
    text = doc.read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    paths = [link.split("#")[0] for link in links if "://" not in link and ":" not in link]
    paths += re.findall(r"`(\.\./[^`\s]+)`", text)
    for path in filter(None, paths):
        target = (doc.parent / path).resolve()
        assert target.is_relative_to(ROOT), f"{doc.name}: {path} is outside the repository"
        assert target.exists(), f"{doc.name}: {path} does not exist"


# ---- quoted results ---------------------------------------------------------------------
@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_quoted_results_are_in_the_repository(doc: Path) -> None:
    """A doc that quotes a benchmark's results file names one git tracks (the results
    directory is ignored but for the files docs quote: a file quoted yet ignored never
    lands), or says it was not kept."""
    text = doc.read_text()
    for m in re.finditer(r"`(bench/results/[^`\s]+\.json)`( \(not kept\))?", text):
        path, not_kept = m.group(1), m.group(2)
        if "<" in path or "*" in path or "$" in path:
            continue  # a pattern (bench/results/chaos-<date>.json), not a file
        if not_kept:
            assert not (ROOT / path).exists(), f"{doc.name}: {path} is here: drop '(not kept)'"
            continue
        assert (ROOT / path).exists(), f"{doc.name}: {path} is quoted but not in the repository"
        tracked = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "--error-unmatch", path],
            capture_output=True,
            check=False,
        )
        assert tracked.returncode == 0, f"{doc.name}: {path} is quoted but git does not track it"


# ---- the README's gRPC example ----------------------------------------------------------
def _error_codes(message: Message) -> Iterator[int]:
    for field, value in message.ListFields():
        if field.name == "error_code":
            yield int(value)
        elif field.message_type is not None:
            for item in value if field.is_repeated else [value]:
                if isinstance(item, Message):
                    yield from _error_codes(item)


def _grpcurl_calls(text: str) -> list[tuple[str, str, str]]:
    """(service, method, JSON body) of every grpcurl call with a body, in order."""
    calls = []
    for block in _code_blocks(text):
        for command in _commands(block):
            if not command.startswith("grpcurl"):
                continue
            args = shlex.split(command)
            body = args[args.index("-d") + 1]
            service, method = args[-1].rsplit("/", 1)
            calls.append((service, method, body))
    return calls


async def _call(channel: grpc.aio.Channel, service: str, method: str, body: str) -> Message:
    descriptor = descriptor_pool.Default().FindServiceByName(service).methods_by_name[method]
    request_cls = message_factory.GetMessageClass(descriptor.input_type)
    response_cls = message_factory.GetMessageClass(descriptor.output_type)
    call = channel.unary_unary(
        f"/{service}/{method}",
        request_serializer=request_cls.SerializeToString,
        response_deserializer=response_cls.FromString,
    )
    response: Message = await call(json_format.Parse(body, request_cls()), timeout=10)
    return response


def test_readme_grpc_example_commits_to_a_topic_it_created(tmp_path: Path) -> None:
    calls = _grpcurl_calls((ROOT / "README.md").read_text())
    assert [m for _, m, _ in calls].count("OffsetCommit") >= 1
    server = ServerProcess(
        ["dev", "--grpc-port", "0", "--kafka-port", "0", "--data-dir", str(tmp_path / "data")],
        tmp_path / "dev.log",
    )

    async def run() -> None:
        created: set[str] = set()
        async with grpc.aio.insecure_channel(server.grpc_address) as channel:
            for service, method, body in calls:
                if method == "OffsetCommit":
                    topics = {t["name"] for t in json.loads(body)["topics"]}
                    assert topics <= created, f"commits to {topics - created}, never created"
                response = await _call(channel, service, method, body)
                assert set(_error_codes(response)) <= {0}, (method, response)
                if method == "CreateTopics":
                    created |= {t["name"] for t in json.loads(body)["topics"]}

    try:
        asyncio.run(run())
    finally:
        server.kill()


# ---- docs/multi-shard.md: several shards on one machine ---------------------------------
def _recipe() -> list[str]:
    text = (ROOT / "docs" / "multi-shard.md").read_text()
    section = text.split("### On one machine", 1)[1]
    return _commands(_code_blocks(section)[0])


def _with_free_ports(commands: list[str]) -> list[str]:
    fixed = sorted(set(re.findall(r"(?<=[: ])(\d{4,5})\b", " ".join(commands))))
    ports = {port: str(free_port()) for port in fixed}
    return [re.sub(r"(?<=[: ])(\d{4,5})\b", lambda m: ports[m.group(1)], c) for c in commands]


def _start_redis(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:  # the server says when it is ready
        if "Ready to accept connections" in line:
            return proc
    raise RuntimeError(f"redis-server exited: {proc.wait()}")


@pytest.mark.slow
def test_single_machine_multi_shard_recipe(tmp_path: Path) -> None:
    commands = _with_free_ports(_recipe())
    redis: subprocess.Popen[str] | None = None
    servers: list[ServerProcess] = []
    try:
        *long_running, report = commands
        for n, command in enumerate(long_running):
            args = shlex.split(command)
            if args[0] == "mkdir":
                subprocess.run(args, cwd=tmp_path, check=True)
            elif args[0] == "redis-server":
                redis = _start_redis(args, tmp_path)
            else:
                assert args[0] == "groupcoord", command
                servers.append(ServerProcess(args[1:], tmp_path / f"{n}-{args[1]}.log"))
        assert report.startswith("groupcoord partitions")
        partitions = [sys.executable, "-m", "services.cli", *shlex.split(report)[1:]]
        shown = subprocess.run(partitions, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr

        # every partition held, spread over the three shards
        deadline = time.monotonic() + 60
        while True:
            out = subprocess.run(
                [*partitions, "--format", "json"], cwd=ROOT, capture_output=True, text=True
            )
            owned = json.loads(out.stdout)
            holders = [p["holder"] for p in owned["partitions"]]
            if all(holders) and len(set(holders)) == 3:
                break
            assert time.monotonic() < deadline, owned
            time.sleep(0.5)

        # and the gateway serves Kafka clients from them
        gateway = next(s for s in servers if s.args[0] == "gateway")

        async def through_gateway() -> Any:
            wire = await KafkaWire.connect("127.0.0.1", gateway.ports["kafka"])
            try:
                return await wire.send(
                    request(
                        "find_coordinator",
                        4,
                        key_type=0,
                        coordinator_keys=[f"g{i}" for i in range(20)],
                    )
                )
            finally:
                await wire.close()

        answer = asyncio.run(through_gateway())
        assert {c.error_code for c in answer.coordinators} == {0}
    finally:
        for server in servers:
            server.kill()
        if redis is not None:
            redis.kill()
            redis.wait()
