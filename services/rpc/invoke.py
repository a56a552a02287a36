"""One way to invoke an RPC, whatever carried the call.

Three transports call the handlers of a service's RPCs: the unary gRPC server
(:mod:`services.rpc.grpc_server`), the batched stream of the gateway → shard hop
(:mod:`services.rpc.batch_calls`) and ``groupcoord dev``'s calls within its own process
(:mod:`services.rpc.local_calls`). Each is a thin adapter around an :class:`Invoker`, which
takes a call through the same steps in the same order (:meth:`Invoker.invoke`):

1. span: a call that carries its caller's trace context in the request (a batch item) gets
   the server span the unary RPC's OpenTelemetry interceptor would make (for a unary call,
   the interceptor makes it); the call is logged at DEBUG inside it;
2. decode: the request's bytes parsed, the client host the transport saw (the peer's; a
   loopback call's) filled in when the caller left it empty -- or put in place of the
   caller's when the caller may not forward one (an authorizer is on and the caller is not
   a trusted gateway: host-based ACLs check the socket peer), the message converted to the
   handler's dataclass by field name (``shards.adapters.convert``); a request that does not
   decode is INVALID_ARGUMENT, its message naming the request type (gRPC's own
   deserializer would answer INTERNAL);
3. principal: when an authorizer asks who is calling, the transport's resolver of the
   caller's principal is set for the handler (``shards.security.context.set_caller``);
4. handler, under the call's deadline: an in-process call's kept in a
   :class:`~services.rpc.deadlines.Deadlines` table (the unary server's is gRPC's own), a
   call past it DEADLINE_EXCEEDED;
5. errors: the store unreachable is UNAVAILABLE (clients retry it); anything else the
   handler raises is UNKNOWN -- answered by the gRPC server itself for a unary call, by the
   invoker for an in-process one;
6. metrics: the call's latency by RPC and status, and the Kafka error codes of its response
   (services.process.metrics), when the server records metrics.

The transports keep what differs: where the bytes, the peer and the principal come from,
how a failure travels back (a unary call is aborted with its status, an in-process call
raises the ``grpc.aio.AioRpcError`` a loopback call would) and what the caller gets (bytes,
a protobuf message, the core's dataclass: :data:`Form`). Before the general path they offer
the RPC's shortcut for its most frequent request (:attr:`Method.steady`,
:meth:`Invoker.shortcut`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError, Message
from opentelemetry import propagate, trace

from services.process.metrics import KafkaErrorMetrics, RpcMetrics
from services.rpc.deadlines import Deadlines
from services.rpc.rpcs import request_class, response_class, snake_case
from shards.adapters.convert import converter_from, converter_to
from shards.security.context import set_caller
from shards.storage.base import StoreUnavailableError

#: where an in-process call's unexpected failure is logged (a unary call's: by gRPC)
_unexpected = logging.getLogger("groupcoord.local")

#: A request this large (serialized) is converted to the core's dataclasses on a worker thread
#: (the default executor) while the event loop serves other calls: a 100,000-partition
#: OffsetCommit takes ~0.7 s to convert.
OFFLOAD_BYTES = 256 * 1024

#: An answer with this many items (its lists and their elements' lists: groups and their
#: members, topics and their partitions) is converted on a worker thread too, whatever the
#: request's size: a ConsumerGroupDescribe of a 5,000-member group is a few bytes asking for
#: ~0.2 s of conversion.
OFFLOAD_ITEMS = 5_000


def answer_items(answer: Any) -> int:
    """About how many items a core answer (a dataclass) has: the lengths of its list and
    tuple fields and of its elements' list and tuple fields, without walking deeper."""
    n = 0
    for value in _values(answer):
        if type(value) is tuple or type(value) is list:
            n += len(value)
            for item in value:
                for inner in _values(item):
                    if type(inner) is tuple or type(inner) is list:
                        n += len(inner)
    return n


def _values(obj: Any) -> Any:
    fields = getattr(type(obj), "__dataclass_fields__", None)
    return () if fields is None else (getattr(obj, name) for name in fields)


#: what a request that does not decode raises: parsing, then converting its fields
DECODE_ERRORS = (DecodeError, ValueError, UnicodeDecodeError)

#: what an invoker takes and gives: ``wire`` -- the request's bytes (or the message already
#: parsed from them) in, the response's bytes out (the unary server, the batched stream);
#: ``message`` -- protobuf messages in and out; ``direct`` -- the core's dataclasses in and
#: out (``dev``'s gateway, in-process)
Form = Literal["wire", "message", "direct"]

_OK = grpc.StatusCode.OK
_CANCELLED = grpc.StatusCode.CANCELLED
_UNKNOWN = grpc.StatusCode.UNKNOWN
_clock = time.perf_counter


@dataclass(frozen=True)
class Method:
    name: str
    request_pb: type[Message]
    response_pb: type[Message]
    request_type: type
    response_type: type
    handler: Callable[[Any], Awaitable[Any]]
    #: a shortcut for the RPC's most frequent request: ``steady(request_bytes, client_host)``
    #: gives ``(the serialized answer the handler would give, None)`` without converting or
    #: awaiting, or ``(None, the parsed request or None)``: then the handler answers (the
    #: request parsed already when the shortcut needed it). Not taken when an authorizer asks
    #: who is calling.
    steady: Callable[[bytes, str], tuple[bytes | None, Any]] | None = None


def service_methods(service: ServiceDescriptor, implementation: object) -> list[Method]:
    """One :class:`Method` per RPC of ``service``, in the proto's order: the handler is the
    implementation's method named after the RPC (:func:`snake_case`), and its annotations
    (one request parameter, the return type) name the dataclasses the RPC's protobuf
    messages convert from and to. A missing or unannotated handler is a programming error
    and raises here, at start-up, rather than answering UNIMPLEMENTED later."""
    out = []
    for rpc in service.methods:
        handler = getattr(implementation, snake_case(rpc.name))
        hints = typing.get_type_hints(handler)
        response_type = hints.pop("return")
        (request_type,) = hints.values()
        out.append(
            Method(
                rpc.name,
                request_class(rpc),
                response_class(rpc),
                request_type,
                response_type,
                handler,
            )
        )
    return out


def client_host_filler(method: Method) -> Callable[[Message, str, bool], None]:
    """What fills a request's ``context.client_host`` with the transport's client host
    when the caller left it empty -- or, ``replace``, whatever the caller sent (a caller
    that may not forward a client host) -- done on the protobuf message before it is
    converted (one field set, no dataclass copies). A no-op for requests without a context."""
    if not _has_context(method):
        return _no_context

    def fill(message: Any, host: str, replace: bool) -> None:
        if replace:
            if message.context.client_host != host:
                message.context.client_host = host
        elif host and not message.context.client_host:
            message.context.client_host = host

    return fill


def _no_context(message: Message, host: str, replace: bool) -> None:
    return None


def dataclass_host_filler(method: Method) -> Callable[[Any, str, bool], Any]:
    """:func:`client_host_filler` for a request already converted: a copy with the client
    host when the caller left it empty or, ``replace``, sent another (``dev``'s gateway
    always fills it, and is trusted: no copy then)."""
    if not _has_context(method):
        return lambda request, host, replace: request

    def fill(request: Any, host: str, replace: bool) -> Any:
        current = request.context.client_host
        if (replace and current != host) or (host and not current):
            context = dataclasses.replace(request.context, client_host=host)
            return dataclasses.replace(request, context=context)
        return request

    return fill


def _has_context(method: Method) -> bool:
    return any(f.name == "context" for f in dataclasses.fields(method.request_type))


@dataclass(frozen=True)
class ServerMetrics:
    """What a server records per call when metrics are on (None: nothing at all)."""

    rpcs: RpcMetrics
    kafka_errors: KafkaErrorMetrics


class Failure(Exception):
    """A call's failure with its gRPC status, as an invoker over gRPC raises it for its
    server to abort the call with (an in-process invoker raises ``grpc.aio.AioRpcError``)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    """The error a loopback gRPC call failing with ``code`` would raise in its caller."""
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class Invoker:
    """One RPC as one transport invokes it (module doc): the steps from the request the
    transport got to what it answers.

    ``service``: the full name of the RPC's service (metrics and spans name the call
    ``<service>/<RPC>``). ``metrics``: what the server records per call (None: nothing).
    ``deadlines``: the table of the calls' deadlines, for transports that keep their own
    (in-process). ``in_process``: failures raise ``grpc.aio.AioRpcError`` as a loopback
    call's would, and an unexpected one is UNKNOWN here; else (over gRPC) they raise
    :class:`Failure` and an unexpected exception goes on to the gRPC server. ``log``: the
    transport's logger of each call at DEBUG, for the calls it names a peer for (None:
    none). ``authorizing``: an authorizer
    asks who is calling, so the shortcut is not offered (:attr:`steady` is None)."""

    __slots__ = (
        "name",
        "path",
        "form",
        "steady",
        "deadlines",
        "_parse",
        "_to_request",
        "_encode",
        "_wire",
        "_fill_host",
        "_fill_dataclass",
        "_handler",
        "_rpcs",
        "_ok",
        "_kafka_errors",
        "_fail",
        "_failure",
        "_in_process",
        "_log",
        "_undecodable",
    )

    def __init__(
        self,
        method: Method,
        service: str = "",
        *,
        form: Form = "wire",
        metrics: ServerMetrics | None = None,
        deadlines: Deadlines | None = None,
        in_process: bool = True,
        log: logging.Logger | None = None,
        authorizing: bool = False,
    ) -> None:
        self.name = method.name
        self.path = f"{service}/{method.name}"
        self.form = form
        #: the RPC's shortcut as this transport may take it (None: not offered)
        self.steady = None if authorizing else method.steady
        #: the deadlines of the calls in flight (in-process transports)
        self.deadlines = deadlines if deadlines is not None else Deadlines()
        self._parse = method.request_pb.FromString
        self._to_request: Callable[[Message], Any] = converter_from(
            method.request_type, method.request_pb
        )
        #: the response's conversion to protobuf (None: the dataclass is the answer),
        #: serialized too for the wire
        self._encode: Callable[[Any], Message] | None = (
            None if form == "direct" else converter_to(method.response_type, method.response_pb)
        )
        self._wire = form == "wire"
        self._fill_host = client_host_filler(method)
        self._fill_dataclass = dataclass_host_filler(method) if form == "direct" else None
        self._handler = method.handler
        self._rpcs = metrics.rpcs if metrics is not None else None
        self._ok = self._rpcs.attrs(self.path, _OK) if self._rpcs is not None else None
        self._kafka_errors = metrics.kafka_errors.record if metrics is not None else None
        self._in_process = in_process
        self._fail: Callable[[grpc.StatusCode, str], Exception] = (
            rpc_error if in_process else Failure
        )
        self._failure: type[Exception] = grpc.aio.AioRpcError if in_process else Failure
        self._log = log
        self._undecodable = (
            f"{method.name}: the request could not be decoded as "
            f"{method.request_pb.DESCRIPTOR.full_name}: "
        )

    def shortcut(self, raw: bytes, host: str, peer: str | None = None) -> tuple[bytes | None, Any]:
        """The RPC's shortcut (:attr:`steady`, not None) offered ``raw`` from ``host``:
        ``(the answer, None)`` -- logged and recorded (OK) as :meth:`invoke` would -- or
        ``(None, the parsed request or None)`` for :meth:`invoke` (a request that does not
        parse is left to it too: it answers INVALID_ARGUMENT)."""
        rpcs = self._rpcs
        started = _clock() if rpcs is not None else 0.0
        try:
            answer, parsed = self.steady(raw, host)  # type: ignore[misc]
        except DecodeError:
            return None, None
        except Exception:
            if rpcs is not None:
                rpcs.record(self.path, _UNKNOWN, _clock() - started)
            raise
        if answer is None:
            return None, parsed
        if peer is not None and self._log is not None:
            self._log.debug("%s from %s", self.name, peer)
        if rpcs is not None:
            rpcs.latency.record(_clock() - started, self._ok)
        return answer, None

    async def invoke(
        self,
        request: Any,
        host: str,
        peer: str | None = None,
        caller: Callable[[], str] | None = None,
        call: int | None = None,
        trace_context: Mapping[str, str] | None = None,
        timeout: float | None = None,
        own_host: bool = False,
    ) -> Any:
        """The call, from ``request`` (as :attr:`form` says) to what the transport answers.

        ``host``: the client host the transport saw, the request's when it names none --
        and whatever it names, ``own_host``: the caller may not forward a client host (an
        authorizer is on and it is no trusted gateway); ``peer``: the transport's name of the
        caller when the call is to be logged at DEBUG (the transport asks its logger: None,
        not logged). ``caller``: resolves the caller's principal (only when an
        authorizer asks). The call's deadline: ``call``, its entry in :attr:`deadlines` (the
        transport entered it when the call began), or ``timeout``, seconds from now (entered
        here, in the task awaiting the call); left here. ``trace_context``: the caller's
        trace context carried in the request (a batch item's): the call gets its server
        span."""
        rpcs = self._rpcs
        started = _clock() if rpcs is not None else 0.0
        code: grpc.StatusCode | None = _OK
        if timeout is not None:
            call = self.deadlines.enter(timeout)
        # the span entered and left by hand: a ``with`` costs an untraced call two calls
        span = self._span(trace_context) if trace_context else None
        big = False
        try:
            if span is not None:
                span.__enter__()
            try:
                if peer is not None and self._log is not None:
                    self._log.debug("%s from %s", self.name, peer)
                if self._fill_dataclass is not None:
                    request = self._fill_dataclass(request, host, own_host)
                else:
                    try:
                        if type(request) is bytes:
                            big = len(request) >= OFFLOAD_BYTES
                            request = self._parse(request)
                        else:
                            big = request.ByteSize() >= OFFLOAD_BYTES
                        self._fill_host(request, host, own_host)
                        if big:  # a large request: converted while the loop serves others
                            request = await asyncio.get_running_loop().run_in_executor(
                                None, self._to_request, request
                            )
                        else:
                            request = self._to_request(request)
                    except DECODE_ERRORS as ex:
                        raise self._fail(
                            grpc.StatusCode.INVALID_ARGUMENT, f"{self._undecodable}{ex}"
                        ) from None
                if caller is not None:
                    set_caller(caller)
                try:
                    response = await self._handler(request)
                except StoreUnavailableError as ex:
                    # the store cannot be reached right now: clients retry UNAVAILABLE
                    raise self._fail(grpc.StatusCode.UNAVAILABLE, f"{self.name}: {ex}") from None
                except asyncio.CancelledError:
                    if call is not None and self.deadlines.expired(call):
                        raise self._fail(
                            grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"
                        ) from None
                    raise
                except Exception as ex:
                    if not self._in_process:
                        raise  # the gRPC server answers UNKNOWN (and logs it)
                    _unexpected.exception("%s failed", self.name)
                    raise self._fail(_UNKNOWN, f"Unexpected {type(ex).__name__}: {ex}") from None
            except BaseException as ex:
                if span is not None:
                    span.__exit__(type(ex), ex, ex.__traceback__)
                raise
            if span is not None:
                span.__exit__(None, None, None)
            if self._kafka_errors is not None:
                self._kafka_errors(self.path, response)
            encode = self._encode
            if encode is None:
                return response
            if big or answer_items(response) >= OFFLOAD_ITEMS:
                # a large answer (of a large request, or asked for by a small one): converted
                # while the loop serves others
                return await asyncio.get_running_loop().run_in_executor(
                    None, self._encoded, response
                )
            return encode(response).SerializeToString() if self._wire else encode(response)
        except asyncio.CancelledError:
            # the caller went away (a unary call's, an abandoned batch item's): CANCELLED;
            # cancelled by anyone else (the batch stream ending): nothing recorded
            code = _CANCELLED if call is None or self.deadlines.abandoned(call) else None
            raise
        except Exception as ex:
            code = ex.code() if isinstance(ex, self._failure) else _UNKNOWN  # type: ignore[attr-defined]
            raise
        finally:
            if call is not None:
                self.deadlines.leave(call)
            if rpcs is not None and code is not None:
                attrs = self._ok if code is _OK else rpcs.attrs(self.path, code)
                rpcs.latency.record(_clock() - started, attrs)

    def _encoded(self, response: Any) -> Any:
        encode = self._encode
        assert encode is not None
        return encode(response).SerializeToString() if self._wire else encode(response)

    def _span(self, trace_context: Mapping[str, str]) -> Any:
        # the span the unary RPC's server interceptor would have made, by the tracer of the
        # one transport that carries trace contexts in its requests (the batch stream)
        return trace.get_tracer("groupcoord.batch").start_as_current_span(
            f"/{self.path}",
            context=propagate.extract(dict(trace_context)),
            kind=trace.SpanKind.SERVER,
        )
