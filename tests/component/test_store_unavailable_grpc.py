"""A store that cannot be reached answers gRPC UNAVAILABLE with a message (clients retry it),
not UNKNOWN with a Python exception name."""

from __future__ import annotations

import grpc
import pytest
from groupcoord.v1 import catalog_pb2

from services.rpc.grpc_server import GrpcServer
from services.rpc.invoke import service_methods
from services.rpc.rpcs import TOPIC_CATALOG_SERVICE
from shards.core import api
from shards.storage.base import StoreUnavailableError


class UnreachableCatalog:
    """Every TopicCatalog RPC finds the store gone."""

    async def create_topics(self, request: api.CreateTopicsRequest) -> api.CreateTopicsResponse:
        raise StoreUnavailableError("redis://127.0.0.1:1/0: read_catalog: Connection refused")

    async def delete_topics(self, request: api.DeleteTopicsRequest) -> api.DeleteTopicsResponse:
        raise StoreUnavailableError("redis://127.0.0.1:1/0: read_catalog: Connection refused")

    async def describe_topics(
        self, request: api.DescribeTopicsRequest
    ) -> api.DescribeTopicsResponse:
        raise StoreUnavailableError("redis://127.0.0.1:1/0: read_catalog: Connection refused")


async def test_store_unavailable_is_grpc_unavailable_with_the_cause() -> None:
    server = GrpcServer("127.0.0.1", 0)
    server.add_service(
        TOPIC_CATALOG_SERVICE.full_name,
        service_methods(TOPIC_CATALOG_SERVICE, UnreachableCatalog()),
    )
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            call = channel.unary_unary(
                f"/{TOPIC_CATALOG_SERVICE.full_name}/CreateTopics",
                request_serializer=catalog_pb2.CreateTopicsRequest.SerializeToString,
                response_deserializer=catalog_pb2.CreateTopicsResponse.FromString,
            )
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call(catalog_pb2.CreateTopicsRequest(), timeout=5)
        assert err.value.code() is grpc.StatusCode.UNAVAILABLE
        assert "CreateTopics" in err.value.details()
        assert "Connection refused" in err.value.details()
    finally:
        await server.stop(0)
