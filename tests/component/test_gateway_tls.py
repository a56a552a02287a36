"""The gateway's Kafka listener over TLS (``--security-protocol SSL``): a real client
(confluent-kafka, i.e. librdkafka) verifies the gateway's certificate, joins a group and
commits through it; client certificates as Kafka's ``ssl.client.auth``; the verified
subject is kept on the connection (``peer_cert_subject``); certificates replaced on disk are
used for new connections. Certificates are made at test time (tests/support/certs.py)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from services.process.tls import SslListener
from tests.support.certs import Ca, Issued, serial_of_der
from tests.support.gateway import Stack, gateway_stack

pytestmark = pytest.mark.interop

QUIET = {"log_level": 0}


@dataclass
class Pki:
    dir: Path
    ca: Ca
    cafile: Path
    server: Issued
    client: Issued


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = Ca()
    return Pki(
        tmp_path,
        ca,
        ca.write(tmp_path),
        ca.issue(tmp_path, "gateway", cn="gateway"),
        ca.issue(tmp_path, "client", cn="alice", ou="eng", o="acme"),
    )


@asynccontextmanager
async def ssl_gateway(
    tmp_path: Path, server: Issued, cafile: Path, client_auth: str = "none"
) -> AsyncIterator[Stack]:
    listener = SslListener(str(server.cert), str(server.key), str(cafile), client_auth)
    settings = {"security_protocol": "SSL", "listener_tls": listener}
    # librdkafka consumers join classic groups: no 3 s initial delay to wait out
    async with gateway_stack(
        tmp_path, gateway=settings, classic_group_initial_rebalance_delay_ms=0
    ) as stack:
        yield stack


def client_config(stack: Stack, pki: Pki, cert: bool, errors: list[str]) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": stack.bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.cafile),
        "ssl.endpoint.identification.algorithm": "https",
        "error_cb": lambda e: errors.append(str(e)),
        **QUIET,
    }
    if cert:
        config["ssl.certificate.location"] = str(pki.client.cert)
        config["ssl.key.location"] = str(pki.client.key)
    return config


def metadata_fails(config: dict[str, Any], errors: list[str]) -> str:
    """Metadata through the listener must fail; returns what the client reported."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(config)
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=2)
    deadline = time.monotonic() + 3
    while not errors and time.monotonic() < deadline:
        admin.poll(0.1)  # serves error_cb
    return " | ".join(errors)


def join_and_commit(config: dict[str, Any], topic: str, group: str) -> list[int]:
    """Create ``topic``, join ``group`` with one consumer, commit and read back an offset;
    returns the partitions assigned."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(10)
    consumer = Consumer({**config, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 20
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assigned = sorted(tp.partition for tp in consumer.assignment())
        consumer.commit(offsets=[TopicPartition(topic, 1, 42)], asynchronous=False)
        (got,) = consumer.committed([TopicPartition(topic, 1)], timeout=10)
        assert got.offset == 42
        return assigned
    finally:
        consumer.close()


def subjects(stack: Stack) -> set[str | None]:
    assert stack.gateway.server is not None
    return {c.peer_cert_subject for c in stack.gateway.server.connections.values()}


async def test_a_consumer_joins_a_group_over_mutual_tls(tmp_path: Path, pki: Pki) -> None:
    async with ssl_gateway(tmp_path, pki.server, pki.cafile, "required") as stack:
        errors: list[str] = []
        config = client_config(stack, pki, cert=True, errors=errors)
        seen: list[set[str | None]] = []

        def run() -> list[int]:
            from confluent_kafka import Consumer

            keep = Consumer({**config, "group.id": "watcher"})  # a connection to look at
            try:
                keep.list_topics(timeout=10)
                seen.append(subjects(stack))
            finally:
                keep.close()
            return join_and_commit(config, "tls-topic", "tls-group")

        assert await asyncio.to_thread(run) == [0, 1, 2]
        # the verified client certificate's subject, as Kafka's User:<DN> principal
        assert seen == [{"CN=alice,OU=eng,O=acme"}]
        # no client certificate: the handshake fails, no connection is served
        without = client_config(stack, pki, cert=False, errors=[])
        await asyncio.to_thread(metadata_fails, without, [])
        assert subjects(stack) == set()


async def test_client_certificates_requested_but_optional(tmp_path: Path, pki: Pki) -> None:
    async with ssl_gateway(tmp_path, pki.server, pki.cafile, "requested") as stack:
        for cert, expected in ((False, None), (True, "CN=alice,OU=eng,O=acme")):
            config = client_config(stack, pki, cert=cert, errors=[])

            def run(config: dict[str, Any] = config) -> set[str | None]:
                from confluent_kafka import Consumer

                c = Consumer({**config, "group.id": "g"})
                try:
                    c.list_topics(timeout=10)
                    return subjects(stack)
                finally:
                    c.close()

            assert await asyncio.to_thread(run) == {expected}


@pytest.mark.parametrize(
    ("make_server", "reason"),
    [
        (
            lambda pki: Ca("untrusted").issue(pki.dir, "rogue", cn="gateway"),
            "unable to get local issuer certificate",
        ),
        (
            lambda pki: pki.ca.issue(pki.dir, "old", cn="gateway", expired=True),
            "certificate has expired",
        ),
    ],
    ids=["untrusted-ca", "expired"],
)
async def test_a_client_refuses_a_bad_server_certificate(
    tmp_path: Path, pki: Pki, make_server: Callable[[Pki], Issued], reason: str
) -> None:
    async with ssl_gateway(tmp_path, make_server(pki), pki.cafile) as stack:
        errors: list[str] = []
        config = client_config(stack, pki, cert=False, errors=errors)
        reported = await asyncio.to_thread(metadata_fails, config, errors)
        assert "certificate verify failed" in reported, reported
        # why, as OpenSSL says it (librdkafka's message does not name the reason)
        with pytest.raises(ssl.SSLCertVerificationError) as info:
            await asyncio.to_thread(presented_serial, stack.kafka_port, pki.cafile)
        assert info.value.verify_message == reason


def presented_serial(port: int, cafile: Path) -> int:
    ctx = ssl.create_default_context(cafile=str(cafile))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as sock,
        ctx.wrap_socket(sock, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return serial_of_der(der)


async def test_a_rotated_listener_certificate_is_used_for_new_connections(
    tmp_path: Path, pki: Pki
) -> None:
    async with ssl_gateway(tmp_path, pki.server, pki.cafile) as stack:
        port = stack.kafka_port
        assert await asyncio.to_thread(presented_serial, port, pki.cafile) == pki.server.serial
        rotated = pki.ca.issue(pki.dir, "gateway", cn="gateway")
        assert await asyncio.to_thread(presented_serial, port, pki.cafile) == rotated.serial
        # and a real client still gets through
        config = client_config(stack, pki, cert=False, errors=[])
        assert await asyncio.to_thread(join_and_commit, config, "t2", "g2") == [0, 1, 2]


async def test_a_plaintext_client_gets_nothing_from_an_ssl_listener(
    tmp_path: Path, pki: Pki
) -> None:
    async with ssl_gateway(tmp_path, pki.server, pki.cafile) as stack:
        errors: list[str] = []
        config = {
            "bootstrap.servers": stack.bootstrap,
            "error_cb": lambda e: errors.append(str(e)),
            **QUIET,
        }
        await asyncio.to_thread(metadata_fails, config, errors)
        # the failed handshake left no connection behind
        await asyncio.sleep(0.2)
        assert stack.gateway.server is not None
        assert not stack.gateway.server.connections


async def test_proxy_mode_broker_listeners_are_ssl_too(tmp_path: Path, pki: Pki) -> None:
    from tests.component.test_gateway_proxy import NODE, FakeKafka

    fake = FakeKafka()
    await fake.start()
    listener = SslListener(str(pki.server.cert), str(pki.server.key), str(pki.cafile), "required")
    settings = {
        "security_protocol": "SSL",
        "listener_tls": listener,
        "upstream_bootstrap": f"127.0.0.1:{fake.port}",
    }
    try:
        async with gateway_stack(tmp_path, gateway=settings) as stack:
            listeners = stack.gateway.broker_listeners
            assert listeners is not None
            port = (await listeners.address(NODE))[1]

            def api_versions(cert: bool) -> tuple[int, bytes]:
                """(the listener certificate's serial, the first bytes of the answer to an
                ApiVersions v0 request: b"" when the connection is closed instead)"""
                ctx = ssl.create_default_context(cafile=str(pki.cafile))
                if cert:
                    ctx.load_cert_chain(pki.client.cert, pki.client.key)
                with (
                    socket.create_connection(("127.0.0.1", port), timeout=5) as sock,
                    ctx.wrap_socket(sock, server_hostname="127.0.0.1") as tls,
                ):
                    der = tls.getpeercert(binary_form=True)
                    # api key 18, version 0, correlation id 7, no client id
                    tls.sendall(struct.pack(">ihhih", 10, 18, 0, 7, -1))
                    try:
                        answer = tls.recv(8)
                    except (ssl.SSLError, ConnectionError):
                        answer = b""  # TLS 1.3: a refused certificate shows up here
                assert der is not None
                return serial_of_der(der), answer

            serial, answer = await asyncio.to_thread(api_versions, True)
            assert serial == pki.server.serial
            assert struct.unpack(">i", answer[4:8]) == (7,)  # answered over TLS
            # the broker listener requires client certificates like the bootstrap one
            assert (await asyncio.to_thread(api_versions, False))[1] == b""
    finally:
        await fake.stop()


async def test_connections_in_their_handshake_count_against_the_limit(
    tmp_path: Path, pki: Pki
) -> None:
    listener = SslListener(str(pki.server.cert), str(pki.server.key), handshake_timeout_s=30)
    settings = {"security_protocol": "SSL", "listener_tls": listener, "max_connections": 1}
    async with gateway_stack(tmp_path, gateway=settings) as stack:
        port = stack.kafka_port
        # a client that connects and never says hello holds the one place for its handshake
        _idle_reader, idle = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.sleep(0.2)
        assert stack.gateway.server is not None and stack.gateway.server.handshaking == 1
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await asyncio.to_thread(presented_serial, port, pki.cafile)
        idle.close()
        await idle.wait_closed()
        await asyncio.sleep(0.2)  # the handshake task sees the close
        assert stack.gateway.server.handshaking == 0
        assert await asyncio.to_thread(presented_serial, port, pki.cafile) == pki.server.serial
