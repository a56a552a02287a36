"""The gateway's TCP listener: one asyncio task per connection, nothing shared between them
but the (stateless) translators."""

from __future__ import annotations

import asyncio
import logging

from services.gateway.connection import READ_CHUNK, Connection, Limits
from services.gateway.handlers import KafkaApis
from services.gateway.metrics import ACCEPTED, REFUSED, GatewayMetrics
from services.gateway.proxy import Proxy
from services.gateway.sasl import SaslAuthenticator
from services.gateway.steady import SteadyHeartbeats
from services.process.tls import SslListener, describe_handshake_error, peer_cert_subject

log = logging.getLogger("groupcoord.gateway.server")


class GatewayServer:
    def __init__(
        self,
        apis: KafkaApis,
        host: str,
        port: int,
        limits: Limits,
        max_connections: int = 100_000,
        proxy: Proxy | None = None,
        node_id: int | None = None,
        metrics: GatewayMetrics | None = None,
        tls: SslListener | None = None,
        sasl: SaslAuthenticator | None = None,
        steady: SteadyHeartbeats | None = None,
    ) -> None:
        self.apis = apis
        #: steady heartbeats answered from the frame (a shard in this process)
        self.steady = steady
        #: SSL and SASL_SSL listeners: each connection's TLS (None: plaintext)
        self.tls = tls
        #: SASL_PLAINTEXT / SASL_SSL listeners: authenticates every connection first
        self.sasl = sasl
        self.metrics = metrics
        if metrics is not None:
            metrics.count_open(lambda: len(self.connections))
        #: proxy mode: forward to the upstream broker ``node_id`` (None: the bootstrap
        #: listener, any broker)
        self.proxy = proxy
        self.node_id = node_id
        self.host = host
        self.requested_port = port
        self.limits = limits
        self.max_connections = max_connections
        self.connections: dict[asyncio.Task[None], Connection] = {}
        #: connections in their TLS handshake (counted against ``max_connections`` too)
        self.handshaking = 0
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None and self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._on_client,
            self.host,
            self.requested_port,
            limit=READ_CHUNK,
        )

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self.connections) + self.handshaking >= self.max_connections:
            log.warning("refusing a connection: %d connections open", len(self.connections))
            if self.metrics is not None:
                self.metrics.connections.add(1, REFUSED)
            writer.close()
            return
        if self.metrics is not None:
            self.metrics.connections.add(1, ACCEPTED)
        subject = None
        if self.tls is not None:
            self.handshaking += 1
            try:
                await writer.start_tls(
                    self.tls.context(), ssl_handshake_timeout=self.tls.handshake_timeout_s
                )
            except (OSError, TimeoutError) as e:  # ssl.SSLError is an OSError
                log.debug(
                    "TLS handshake with %s failed: %s",
                    writer.get_extra_info("peername"),
                    describe_handshake_error(e),
                )
                writer.transport.abort()
                return
            finally:
                self.handshaking -= 1
            subject = peer_cert_subject(writer.get_extra_info("ssl_object"))
        session = self.proxy.session(self.node_id) if self.proxy is not None else None
        sasl = self.sasl
        peer = writer.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) and peer else ""
        conn = Connection(
            self.apis,
            self.limits,
            reader,
            writer,
            session,
            self.metrics,
            sasl.session(host) if sasl is not None else None,
            sasl.settings.failed_authentication_delay_ms / 1000 if sasl is not None else 0.0,
            self.steady,
        )
        conn.peer_cert_subject = subject
        task = asyncio.current_task()
        assert task is not None
        self.connections[task] = conn
        try:
            await conn.run()
        finally:
            self.connections.pop(task, None)

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting; let each connection finish its request in flight (up to
        ``grace_s``), then close every connection."""
        if self._server is not None:
            self._server.close()
        for conn in self.connections.values():
            conn.interrupt()  # an idle connection stops waiting for a request
        tasks = list(self.connections)
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=grace_s)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
