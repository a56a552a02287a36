"""``groupcoord.v1.Assignor/Assign``: decode, validate, assign, encode -- off the event loop.

Each request is handled entirely on a worker thread, from the raw request bytes to the raw
response bytes, so the server's event loop stays free for health checks, reflection and
accepting calls while a large assignment runs. Worker threads (default one: the GIL makes more
threads interleave CPU-bound work rather than run it in parallel; scale with replicas) take
requests in arrival order; a request whose caller gave up before a worker took it is dropped
unstarted.

Status codes: a request that cannot be parsed or holds an invalid spec, or names an assignor
that is not registered -> INVALID_ARGUMENT with the reason; an assignor that is registered but
cannot be loaded -> FAILED_PRECONDITION; an assignor that raises or returns an assignment that
does not fit the spec -> INTERNAL.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from groupcoord.v1 import assignor_pb2

from assignors.registry import AssignorLoadError, UnknownAssignorError, load_assignor
from assignors.spec import InvalidAssignmentError, InvalidSpecError, PartitionAssignor, validate
from services.assignor.codec import decode_request, encode_assignment
from services.process.metrics import RpcMetrics
from services.rpc.grpc_server import measured

log = logging.getLogger("groupcoord.assignor")

ASSIGNOR = "groupcoord.v1.Assignor"


class AssignError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class AssignorService:
    """Stateless apart from a cache of loaded assignors (they are stateless themselves)."""

    def __init__(
        self, worker_threads: int = 1, loaded: dict[str, PartitionAssignor] | None = None
    ) -> None:
        """``loaded``: the cache of loaded assignors, when several services share one (the
        simulator's replicas: loading scans the entry points, milliseconds each time)."""
        self._pool = ThreadPoolExecutor(worker_threads, thread_name_prefix="assign")
        self._assignors: dict[str, PartitionAssignor] = {} if loaded is None else loaded
        self._lock = threading.Lock()
        #: served / rejected / failed requests, for tests and logs
        self.counts = {"ok": 0, "invalid": 0, "failed": 0}

    def assignor(self, name: str) -> PartitionAssignor:
        with self._lock:
            found = self._assignors.get(name)
            if found is None:
                try:
                    found = self._assignors[name] = load_assignor(name)
                except UnknownAssignorError as e:
                    raise AssignError(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None
                except AssignorLoadError as e:
                    raise AssignError(grpc.StatusCode.FAILED_PRECONDITION, str(e)) from None
            return found

    def assign_bytes(self, raw: bytes) -> bytes:
        """The whole request, on a worker thread: bytes in, bytes out, ``AssignError`` out."""
        t0 = time.perf_counter()
        try:
            msg = assignor_pb2.AssignRequest.FromString(raw)
        except DecodeError as e:
            raise AssignError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the request could not be decoded as groupcoord.v1.AssignRequest: {e}",
            ) from None
        log.debug("assigning group %r epoch %d (%d bytes)", msg.group_id, msg.group_epoch, len(raw))
        try:
            name, spec = decode_request(msg)
            validate(spec)
        except InvalidSpecError as e:
            raise AssignError(grpc.StatusCode.INVALID_ARGUMENT, f"invalid spec: {e}") from None
        assignor = self.assignor(name)
        t1 = time.perf_counter()
        try:
            assignment = assignor.assign(spec)
        except InvalidSpecError as e:
            raise AssignError(grpc.StatusCode.INVALID_ARGUMENT, f"invalid spec: {e}") from None
        except Exception as e:
            log.exception("assignor %r failed", name)
            raise AssignError(grpc.StatusCode.INTERNAL, f"assignor {name!r} failed: {e!r}") from e
        t2 = time.perf_counter()
        try:
            out = encode_assignment(spec, assignment).SerializeToString()
        except (InvalidAssignmentError, ValueError, TypeError) as e:
            raise AssignError(
                grpc.StatusCode.INTERNAL, f"assignor {name!r} returned an invalid assignment: {e}"
            ) from None
        log.debug(
            "assigned group %r epoch %d with %r: %d members, %d topics; decode %.1f ms, "
            "assign %.1f ms, encode %.1f ms",
            msg.group_id,
            msg.group_epoch,
            name,
            len(spec.members),
            len(spec.topics),
            (t1 - t0) * 1e3,
            (t2 - t1) * 1e3,
            (time.perf_counter() - t2) * 1e3,
        )
        return out

    async def assign(self, raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        loop = asyncio.get_running_loop()
        try:
            # Cancelling the awaiting coroutine (caller gone) cancels a not-yet-started job.
            # The worker runs in this call's context (run_in_executor does not copy it), so
            # that its log lines carry the RPC's trace id.
            context_copy = contextvars.copy_context()
            out = await loop.run_in_executor(self._pool, context_copy.run, self.assign_bytes, raw)
        except AssignError as e:
            self.counts["invalid" if e.code is grpc.StatusCode.INVALID_ARGUMENT else "failed"] += 1
            if e.code is not grpc.StatusCode.INVALID_ARGUMENT:
                log.warning("Assign failed: %s", e.message)
            await context.abort(e.code, e.message)
            raise  # unreachable: abort raises
        self.counts["ok"] += 1
        return out

    def handler(self, rpcs: RpcMetrics | None = None) -> grpc.GenericRpcHandler:
        # Raw bytes in and out: parsing happens on the worker thread (and a request that
        # cannot be parsed gets INVALID_ARGUMENT, not gRPC's INTERNAL).
        assign: Any = self.assign
        if rpcs is not None:
            assign = measured(assign, f"{ASSIGNOR}/Assign", rpcs)
        return grpc.method_handlers_generic_handler(
            ASSIGNOR, {"Assign": grpc.unary_unary_rpc_method_handler(assign)}
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
