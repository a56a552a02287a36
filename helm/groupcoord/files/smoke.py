"""Smoke check of a running groupcoord deployment (the chart's `helm test` hook).

Runs with the groupcoord image's own interpreter (grpcio and kio are installed there):

    python smoke.py --health HOST:PORT [--health HOST:PORT ...] --kafka HOST:PORT
        [--tls-health HOST:PORT ... --grpc-cafile CA --grpc-certfile CERT --grpc-keyfile KEY]
        [--kafka-cafile CA [--kafka-certfile CERT --kafka-keyfile KEY]]

(--tls-health: a health check over TLS with the --grpc-* files; the --kafka-* files: the
gateway's listener over SSL)

1. every ``--health`` address answers the gRPC health service ("") with SERVING;
2. through the Kafka gateway at ``--kafka``: CreateTopics (forwarded upstream in proxy mode,
   "already exists" is fine), then OffsetCommit of a fresh group and OffsetFetch of it, which
   must give back the committed offset.

Retries what a starting deployment answers (coordinator loading or not available, a topic the
catalog does not have yet) until ``--timeout``. Exit 0 on success, 1 with one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import ssl
import sys
import time
import uuid

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from kio.schema.create_topics.v5.request import CreatableTopic, CreateTopicsRequest
from kio.schema.errors import ErrorCode
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v8.request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
)
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i16, i32, i32Timedelta, i64

from services.upstream.cluster import UpstreamCluster
from services.upstream.wire import UpstreamFailure

RETRIABLE = {
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
    ErrorCode.unknown_topic_or_partition,
}


class SmokeFailure(Exception):
    pass


def _channel(address: str, tls: argparse.Namespace | None) -> grpc.Channel:
    if tls is None:
        return grpc.insecure_channel(address)

    def read(path: str | None) -> bytes | None:
        if path is None:
            return None
        with open(path, "rb") as f:
            return f.read()

    credentials = grpc.ssl_channel_credentials(
        read(tls.grpc_cafile), read(tls.grpc_keyfile), read(tls.grpc_certfile)
    )
    return grpc.secure_channel(address, credentials)


def check_health(address: str, deadline: float, tls: argparse.Namespace | None = None) -> None:
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            with _channel(address, tls) as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                answer = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=3)
            if answer.status == health_pb2.HealthCheckResponse.SERVING:
                print(f"health {address}: SERVING", flush=True)
                return
            last = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
        except grpc.RpcError as ex:
            last = f"{ex.code().name}: {ex.details()}"
        time.sleep(1)
    raise SmokeFailure(f"health {address}: not SERVING ({last})")


async def commit_and_fetch(
    kafka: str, topic: str, deadline: float, ssl_context: ssl.SSLContext | None = None
) -> None:
    cluster = UpstreamCluster(kafka, ssl_context, connect_timeout_s=5, request_timeout_s=30)
    group = GroupId(f"groupcoord-smoke-{uuid.uuid4().hex[:12]}")
    offset = 4242
    try:
        while True:  # retriable as Kafka's admin client retries it (shards still settling)
            created = await cluster.call(
                CreateTopicsRequest(
                    topics=(
                        CreatableTopic(
                            name=TopicName(topic),
                            num_partitions=i32(1),
                            replication_factor=i16(-1),
                            assignments=(),
                            configs=(),
                        ),
                    ),
                    timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
                )
            )
            code = created.topics[0].error_code
            if code in (ErrorCode.none, ErrorCode.topic_already_exists):
                break
            why = code.name + (f" ({m})" if (m := created.topics[0].error_message) else "")
            if code not in RETRIABLE or time.monotonic() > deadline:
                raise SmokeFailure(f"CreateTopics {topic}: {why}")
            print(f"CreateTopics {topic}: {why}; retrying", file=sys.stderr, flush=True)
            await asyncio.sleep(1)
        last = "no answer"
        while True:
            response = await cluster.call(
                OffsetCommitRequest(
                    group_id=group,
                    member_id="",
                    topics=(
                        OffsetCommitRequestTopic(
                            name=TopicName(topic),
                            partitions=(
                                OffsetCommitRequestPartition(
                                    partition_index=i32(0),
                                    committed_offset=i64(offset),
                                    committed_metadata="smoke",
                                ),
                            ),
                        ),
                    ),
                )
            )
            code = response.topics[0].partitions[0].error_code
            if code == ErrorCode.none:
                break
            if code not in RETRIABLE:
                raise SmokeFailure(f"OffsetCommit: {code.name}")
            last = code.name
            if time.monotonic() > deadline:
                raise SmokeFailure(f"OffsetCommit: still {last}")
            await asyncio.sleep(1)
        fetched = await cluster.call(
            OffsetFetchRequest(
                groups=(
                    OffsetFetchRequestGroup(
                        group_id=group,
                        topics=(
                            OffsetFetchRequestTopics(
                                name=TopicName(topic), partition_indexes=(i32(0),)
                            ),
                        ),
                    ),
                ),
            )
        )
        answer = fetched.groups[0]
        if answer.error_code != ErrorCode.none:
            raise SmokeFailure(f"OffsetFetch: {answer.error_code.name}")
        got = answer.topics[0].partitions[0].committed_offset
        if got != offset:
            raise SmokeFailure(f"OffsetFetch gave offset {got}, committed {offset}")
        print(f"gateway {kafka}: committed and fetched offset {offset} of {group}", flush=True)
    finally:
        await cluster.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--health", action="append", default=[], metavar="HOST:PORT")
    parser.add_argument("--tls-health", action="append", default=[], metavar="HOST:PORT")
    parser.add_argument("--kafka", required=True, metavar="HOST:PORT")
    parser.add_argument("--topic", default="groupcoord-smoke")
    parser.add_argument("--timeout", type=float, default=120.0)
    for side in ("grpc", "kafka"):
        for what in ("cafile", "certfile", "keyfile"):
            parser.add_argument(f"--{side}-{what}", default=None)
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.timeout
    ssl_context = None
    if args.kafka_cafile is not None:
        ssl_context = ssl.create_default_context(cafile=args.kafka_cafile)
        if args.kafka_certfile is not None:
            ssl_context.load_cert_chain(args.kafka_certfile, args.kafka_keyfile)
    try:
        for address in args.tls_health:
            check_health(address, deadline, args)
        for address in args.health:
            check_health(address, deadline)
        asyncio.run(commit_and_fetch(args.kafka, args.topic, deadline, ssl_context))
    except (SmokeFailure, UpstreamFailure, OSError, TimeoutError) as ex:
        print(f"smoke check failed: {ex}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
