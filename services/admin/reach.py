"""Whether a groupcoord server answers at ``--bootstrap``, and if not, what is there instead.

The operator commands ask this once, before their first call: a group call re-routes and
retries until its deadline (a shard may be restarting), so without it a wrong ``--bootstrap``
took the whole ``--timeout-ms`` (30 s) to fail, with a message that named no mistake. Here it
fails at once (one health check per address, at most a few seconds for an address that
drops packets), saying what answered: nothing (connection refused), a Kafka listener (the
gateway's or a broker's port given for the gRPC one: a common slip, ``dev`` prints both), a
gRPC server that is no shard (an assignor), or a server that does not speak gRPC.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable, Sequence

import grpc
from groupcoord.v1 import coordinator_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

#: the health entry every shard (and dev) keeps, the service the group commands call
GROUP_COORDINATOR = coordinator_pb2.DESCRIPTOR.services_by_name["GroupCoordinator"].full_name

#: what every "no groupcoord server there" message ends with
BOOTSTRAP_HINT = (
    "--bootstrap takes the gRPC address of groupcoord dev or of a shard (dev prints "
    "'groupcoord: gRPC listening on HOST:PORT'; default 127.0.0.1:50051)"
)
#: the longest one check waits for an address that neither answers nor refuses
MAX_CHECK_S = 3.0

_API_VERSIONS = 18
_PROBE_CORRELATION_ID = 0x67636B31  # arbitrary: what a Kafka listener must echo


async def check_bootstrap(
    addresses: Sequence[str],
    channel_of: Callable[[str], grpc.aio.Channel],
    timeout_s: float,
    tls: bool = False,
) -> str | None:
    """None if a groupcoord shard (or dev) answers at one of ``addresses`` (``channel_of``
    gives the channel to one; ``tls``: its channels use TLS), else one line saying what each
    one is."""
    wait = min(timeout_s, MAX_CHECK_S)
    problems: list[str] = []
    for address in addresses:
        problem = await _check(address, channel_of(address), wait, tls)
        if problem is None:
            return None
        problems.append(problem)
    return "; ".join(problems) + "; " + BOOTSTRAP_HINT


async def _check(address: str, channel: grpc.aio.Channel, wait_s: float, tls: bool) -> str | None:
    try:
        await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=GROUP_COORDINATOR), timeout=wait_s
        )
    except grpc.aio.AioRpcError as ex:
        code = ex.code()
        if code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNIMPLEMENTED):
            return (
                f"{address} answers gRPC but is no groupcoord shard (it serves no "
                f"{GROUP_COORDINATOR}: an assignor, or a gateway's health port?)"
            )
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return f"nothing answered at {address} within {wait_s:g} s"
        if code == grpc.StatusCode.UNAVAILABLE:
            return await _what_is_there(address, ex.details() or "", wait_s, tls)
        return None  # a server that answers (e.g. refuses the caller): the call will say
    return None  # SERVING or not yet (loading): the commands wait for it as before


async def _what_is_there(address: str, details: str, wait_s: float, tls: bool) -> str:
    """Why a gRPC call to ``address`` found no server: nothing listens, a Kafka listener
    (it answers ApiVersions), or something else."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), wait_s)
    except ConnectionRefusedError:
        return f"nothing listens at {address} (connection refused)"
    except (OSError, ValueError, TimeoutError):
        return f"no groupcoord server answered at {address} (UNAVAILABLE: {details})"
    try:
        if await _answers_kafka(reader, writer, wait_s):
            return (
                f"{address} is a Kafka port (a groupcoord gateway's or a Kafka broker's), "
                "not a gRPC one"
            )
    finally:
        writer.close()
    guess = "a plaintext server, given --tls-*?" if tls else "TLS without --tls-cafile?"
    return f"{address} does not answer gRPC (UNAVAILABLE: {details}; {guess})"


async def _answers_kafka(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, wait_s: float
) -> bool:
    """Whether the peer answers a Kafka ApiVersions v0 request as a Kafka listener does
    (any broker, of any version, answers it, also before SASL authentication)."""
    client_id = b"groupcoord-cli"
    header = struct.pack(">hhih", _API_VERSIONS, 0, _PROBE_CORRELATION_ID, len(client_id))
    request = header + client_id
    try:
        writer.write(struct.pack(">i", len(request)) + request)
        await writer.drain()
        answer = await asyncio.wait_for(reader.readexactly(8), wait_s)
    except (OSError, asyncio.IncompleteReadError, TimeoutError):
        return False
    size, correlation_id = struct.unpack(">ii", answer)
    return size >= 4 and correlation_id == _PROBE_CORRELATION_ID
