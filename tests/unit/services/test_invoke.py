"""services.rpc.invoke: one way to invoke an RPC -- the same steps, statuses and messages
whichever transport carried the call (the unary server's invoker over gRPC, the batch
stream's and ``dev``'s in process)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from groupcoord.v1 import catalog_pb2

from services.rpc.invoke import Failure, Invoker, Method, ServerMetrics, service_methods
from services.rpc.rpcs import TOPIC_CATALOG_SERVICE
from shards.core import api
from shards.storage.base import StoreUnavailableError


class FakeCatalog:
    """A topic catalog whose DescribeTopics answers, fails or hangs as told."""

    def __init__(self) -> None:
        self.seen: list[api.DescribeTopicsRequest] = []
        self.fail: BaseException | None = None
        self.hang = False

    async def create_topics(self, request: api.CreateTopicsRequest) -> api.CreateTopicsResponse:
        raise NotImplementedError

    async def delete_topics(self, request: api.DeleteTopicsRequest) -> api.DeleteTopicsResponse:
        raise NotImplementedError

    async def describe_topics(
        self, request: api.DescribeTopicsRequest
    ) -> api.DescribeTopicsResponse:
        self.seen.append(request)
        if self.fail is not None:
            raise self.fail
        if self.hang:
            await asyncio.get_running_loop().create_future()
        return api.DescribeTopicsResponse(catalog_version=7)


class FakeLatency:
    def __init__(self) -> None:
        self.recorded: list[str] = []

    def record(self, seconds: float, attrs: dict[str, str]) -> None:
        self.recorded.append(attrs["grpc_status"])


class FakeRpcMetrics:
    def __init__(self) -> None:
        self.latency = FakeLatency()

    def attrs(self, method: str, code: grpc.StatusCode | None) -> dict[str, str]:
        return {"method": method, "grpc_status": code.name if code else "UNKNOWN"}

    def record(self, method: str, code: grpc.StatusCode | None, seconds: float) -> None:
        self.latency.record(seconds, self.attrs(method, code))


class FakeKafkaErrors:
    def __init__(self) -> None:
        self.responses: list[Any] = []

    def record(self, method: str, response: Any) -> None:
        self.responses.append(response)


def describe(catalog: FakeCatalog) -> Method:
    (method,) = [
        m for m in service_methods(TOPIC_CATALOG_SERVICE, catalog) if m.name == "DescribeTopics"
    ]
    return method


REQUEST = catalog_pb2.DescribeTopicsRequest(topic_names=["t"])
NAME = "DescribeTopics"


async def test_every_form_takes_the_same_steps_to_the_same_answer() -> None:
    catalog = FakeCatalog()
    m = describe(catalog)
    wire = await Invoker(m, form="wire").invoke(REQUEST.SerializeToString(), "10.0.0.1")
    assert catalog_pb2.DescribeTopicsResponse.FromString(wire).catalog_version == 7
    message = await Invoker(m, form="message").invoke(catalog_pb2.DescribeTopicsRequest(), "h2")
    assert message == catalog_pb2.DescribeTopicsResponse(catalog_version=7)
    direct = await Invoker(m, form="direct").invoke(api.DescribeTopicsRequest(), "h3")
    assert direct == api.DescribeTopicsResponse(catalog_version=7)
    # the client host the transport saw, filled in where the caller left it empty
    assert [r.context.client_host for r in catalog.seen] == ["10.0.0.1", "h2", "h3"]
    assert catalog.seen[0].topic_names == ("t",)


@pytest.mark.parametrize(
    ("fail", "raw", "code", "details"),
    [
        (StoreUnavailableError("down"), None, grpc.StatusCode.UNAVAILABLE, f"{NAME}: down"),
        (
            None,
            b"\xff",
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{NAME}: the request could not be decoded as groupcoord.v1.DescribeTopicsRequest: ",
        ),
    ],
)
async def test_a_failure_has_one_status_and_message_in_process_and_over_grpc(
    fail: BaseException | None, raw: bytes | None, code: grpc.StatusCode, details: str
) -> None:
    catalog = FakeCatalog()
    catalog.fail = fail
    request = raw if raw is not None else REQUEST.SerializeToString()
    with pytest.raises(grpc.aio.AioRpcError) as in_process:
        await Invoker(describe(catalog)).invoke(request, "h")
    with pytest.raises(Failure) as over_grpc:
        await Invoker(describe(catalog), in_process=False).invoke(request, "h")
    assert in_process.value.code() == over_grpc.value.code() == code
    assert in_process.value.details() == over_grpc.value.details()
    assert over_grpc.value.details().startswith(details)


async def test_an_unexpected_failure_is_unknown_in_process_and_the_grpc_servers_otherwise() -> None:
    catalog = FakeCatalog()
    catalog.fail = KeyError("x")
    with pytest.raises(grpc.aio.AioRpcError) as in_process:
        await Invoker(describe(catalog)).invoke(REQUEST.SerializeToString(), "h")
    assert in_process.value.code() is grpc.StatusCode.UNKNOWN
    assert in_process.value.details() == "Unexpected KeyError: 'x'"
    # over gRPC the exception goes on: the server answers UNKNOWN (and logs it)
    with pytest.raises(KeyError):
        await Invoker(describe(catalog), in_process=False).invoke(REQUEST.SerializeToString(), "h")


async def test_a_call_past_its_deadline_is_deadline_exceeded_and_leaves_its_entry() -> None:
    catalog = FakeCatalog()
    catalog.hang = True
    invoker = Invoker(describe(catalog))
    with pytest.raises(grpc.aio.AioRpcError) as exceeded:
        await invoker.invoke(REQUEST, "h", call=invoker.deadlines.enter(0.01))
    assert exceeded.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert exceeded.value.details() == "Deadline Exceeded"
    assert invoker.deadlines._calls == {}


async def test_metrics_record_each_calls_status_once() -> None:
    catalog = FakeCatalog()
    rpcs, kafka_errors = FakeRpcMetrics(), FakeKafkaErrors()
    metrics = ServerMetrics(rpcs, kafka_errors)  # type: ignore[arg-type]
    invoker = Invoker(describe(catalog), "groupcoord.v1.TopicCatalog", metrics=metrics)
    await invoker.invoke(REQUEST.SerializeToString(), "h")
    catalog.fail = StoreUnavailableError("down")
    with pytest.raises(grpc.aio.AioRpcError):
        await invoker.invoke(REQUEST.SerializeToString(), "h")
    catalog.fail, catalog.hang = None, True
    # calls entered in the table as the batch stream enters its items: by their task
    entries: dict[str, int] = {}

    async def item(name: str) -> Any:
        return await invoker.invoke(REQUEST, "h", call=entries[name])

    loop = asyncio.get_running_loop()
    tasks = {name: loop.create_task(item(name)) for name in ("abandoned", "ended")}
    for name, task in tasks.items():
        entries[name] = invoker.deadlines.enter(None, task)
    await asyncio.sleep(0)
    invoker.deadlines.abandon(entries["abandoned"])  # the caller gave up: CANCELLED
    tasks["ended"].cancel()  # cancelled by anyone else (the stream ended): nothing
    for task in tasks.values():
        with pytest.raises(asyncio.CancelledError):
            await task
    assert rpcs.latency.recorded == ["OK", "UNAVAILABLE", "CANCELLED"]
    assert [r.catalog_version for r in kafka_errors.responses] == [7]
    assert invoker.deadlines._calls == {}
