"""A minimal Kafka wire client over asyncio and kio, for tests and benchmarks.

It sends exactly the request it is given (any API, any version -- the kio class decides) and
returns the decoded response, so the same raw sequences run against Apache Kafka and the
groupcoord gateway. Requests can be pipelined (``send_many``)."""

from __future__ import annotations

import asyncio
import io
import struct
from collections.abc import Sequence
from typing import Any

from kio.schema.index import api_key_map
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from services.upstream.wire import entity_class

API_VERSIONS = 18


def response_class_for(request: Any) -> type:
    cls = entity_class(request.__api_key__, request.__version__, EntityType.response)
    assert cls is not None, request
    return cls


def encode_request(request: Any, correlation_id: int, client_id: str | None = "wire") -> bytes:
    buf = io.BytesIO()
    if request.__flexible__:
        entity_writer(RequestHeaderV2)(
            buf,
            RequestHeaderV2(
                request_api_key=request.__api_key__,
                request_api_version=request.__version__,
                correlation_id=correlation_id,
                client_id=client_id,
            ),
        )
    else:
        entity_writer(RequestHeaderV1)(
            buf,
            RequestHeaderV1(
                request_api_key=request.__api_key__,
                request_api_version=request.__version__,
                correlation_id=correlation_id,
                client_id=client_id,
            ),
        )
    entity_writer(type(request))(buf, request)
    payload = buf.getvalue()
    return struct.pack(">i", len(payload)) + payload


def decode_response(request: Any, payload: bytes) -> tuple[int, Any]:
    cls = response_class_for(request)
    flexible_header = cls.__flexible__ and request.__api_key__ != API_VERSIONS
    header_cls = ResponseHeaderV1 if flexible_header else ResponseHeaderV0
    header, offset = entity_reader(header_cls)(payload, 0)
    body, _ = entity_reader(cls)(payload, offset)
    return header.correlation_id, body


class KafkaWire:
    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str | None
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.client_id = client_id
        self._next = 1

    @classmethod
    async def connect(cls, host: str, port: int, client_id: str | None = "wire") -> KafkaWire:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, client_id)

    async def read_frame(self) -> bytes:
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        return await self.reader.readexactly(size)

    async def send(self, request: Any, timeout: float = 30.0) -> Any:
        return (await self.send_many([request], timeout))[0]

    async def send_many(self, requests: Sequence[Any], timeout: float = 30.0) -> list[Any]:
        """Pipeline the requests (all written before any answer is read); answers in order."""
        ids = []
        out = bytearray()
        for r in requests:
            ids.append(self._next)
            out += encode_request(r, self._next, self.client_id)
            self._next += 1
        self.writer.write(bytes(out))
        await self.writer.drain()
        answers = []
        for r, cid in zip(requests, ids, strict=True):
            payload = await asyncio.wait_for(self.read_frame(), timeout)
            got, body = decode_response(r, payload)
            assert got == cid, f"correlation id {got}, expected {cid}"
            answers.append(body)
        return answers

    async def write_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True if the peer closes the connection (EOF or reset) within ``timeout``."""
        try:
            data = await asyncio.wait_for(self.reader.read(1 << 16), timeout)
        except (ConnectionError, asyncio.IncompleteReadError):
            return True
        except TimeoutError:
            return False
        return data == b""

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


def request(name: str, version: int, **data: Any) -> Any:
    """A kio request entity of any API/version from plain data (milliseconds as ints, topic
    ids as Kafka's base64 text, structs as dicts); fields left out take their zero value."""
    from services.gateway.codec import build

    cls = entity_class(
        next(k for k, n in api_key_map.items() if n == name), version, EntityType.request
    )
    assert cls is not None, (name, version)
    return build(cls, data, fill=True)
