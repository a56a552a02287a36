"""TLS and mutual TLS on the gRPC servers (services.process.tls): a real shard app serving
TLS with certificates made at test time (tests/support/certs.py), real clients: the project's
CoordinatorClient, the health probe, and a bare ``ssl`` socket to read the certificate the
server presents. Certificate files replaced on disk are used for new connections without a
restart."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from groupcoord.v1 import groups_pb2

from services.client import CoordinatorClient, RetryPolicy
from services.process import channels
from services.process.health import probe
from services.process.tls import ClientTls, ServerTls, TlsError, grpc_peer_subject
from services.rpc.grpc_server import GrpcServer
from services.shard.app import ShardApp, ShardSettings
from shards.core.coordinator_config import CoordinatorConfig
from tests.support.certs import Ca, Issued, serial_of_der


@dataclass
class Pki:
    dir: Path
    ca: Ca
    cafile: Path
    server: Issued
    client: Issued
    #: signed by a CA the server does not trust
    rogue: Issued


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca, rogue_ca = Ca("groupcoord-test-ca"), Ca("rogue-ca")
    return Pki(
        tmp_path,
        ca,
        ca.write(tmp_path),
        ca.issue(tmp_path, "server", cn="shard"),
        ca.issue(tmp_path, "client", cn="alice", ou="eng", o="acme"),
        rogue_ca.issue(tmp_path, "rogue", cn="alice", ou="eng", o="acme"),
    )


def server_tls(pki: Pki, client_auth: str = "required") -> ServerTls:
    return ServerTls(str(pki.server.cert), str(pki.server.key), str(pki.cafile), client_auth)


def client_tls(pki: Pki, who: Issued | None, server_name: str | None = None) -> ClientTls:
    if who is None:
        return ClientTls(str(pki.cafile), server_name=server_name)
    return ClientTls(str(pki.cafile), str(who.cert), str(who.key), server_name)


@pytest.fixture
async def shard(tmp_path: Path, pki: Pki) -> AsyncIterator[ShardApp]:
    app = ShardApp(
        ShardSettings(
            store_url=f"sqlite:///{tmp_path / 'gc.db'}",
            grpc_port=0,
            catalog_poll_ms=50,
            shutdown_grace_s=1.0,
            coordinator=CoordinatorConfig(num_partitions=4),
            tls=server_tls(pki),
            health_port=0,
        )
    )
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


async def list_groups(port: int, tls: ClientTls | None) -> list[str]:
    policy = RetryPolicy(deadline_s=3.0, attempt_timeout_s=1.5)
    async with CoordinatorClient([f"127.0.0.1:{port}"], policy, tls=tls) as client:
        listed = await client.list_groups(groups_pb2.ListGroupsRequest())
    return [g.group_id for g in listed.groups]


async def refused(port: int, tls: ClientTls | None) -> str:
    """The gRPC status of a health check the server must refuse (at the handshake)."""
    status = await probe(f"127.0.0.1:{port}", timeout_s=2.0, tls=tls)
    assert status.startswith("RPC_UNAVAILABLE"), status
    return status


def presented_serial(port: int, pki: Pki) -> int:
    """The serial number of the certificate the server presents to a new connection."""
    ctx = ssl.create_default_context(cafile=str(pki.cafile))
    ctx.load_cert_chain(pki.client.cert, pki.client.key)
    ctx.set_alpn_protocols(["h2"])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as sock,
        ctx.wrap_socket(sock, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return serial_of_der(der)


async def test_mutual_tls_admits_only_clients_with_a_certificate_from_the_ca(
    shard: ShardApp, pki: Pki
) -> None:
    port = shard.port
    # a certificate from the CA: served
    assert await probe(f"127.0.0.1:{port}", tls=client_tls(pki, pki.client)) == "SERVING"
    assert await list_groups(port, client_tls(pki, pki.client)) == []
    # no client certificate, a certificate from another CA, plaintext: refused
    await refused(port, client_tls(pki, None))
    await refused(port, client_tls(pki, pki.rogue))
    await refused(port, None)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await list_groups(port, client_tls(pki, pki.rogue))
    assert info.value.code() is grpc.StatusCode.UNAVAILABLE


async def test_the_plaintext_health_port_serves_health_only(shard: ShardApp) -> None:
    assert shard.server is not None and shard.server.health_port is not None
    target = f"127.0.0.1:{shard.server.health_port}"
    assert await probe(target) == "SERVING"  # what a Kubernetes gRPC probe sees
    assert await probe(target, "groupcoord.Liveness") == "SERVING"
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await list_groups(shard.server.health_port, None)
    assert info.value.code() is grpc.StatusCode.UNIMPLEMENTED


async def test_a_client_checks_the_server_certificate(shard: ShardApp, pki: Pki) -> None:
    port = shard.port
    other = Ca("not-the-servers-ca")
    other_ca = other.write(pki.dir, "other-ca.crt")
    wrong_ca = ClientTls(str(other_ca), str(pki.client.cert), str(pki.client.key))
    await refused(port, wrong_ca)
    # The server's certificate names localhost and 127.0.0.1: another expected name fails,
    # unless it is the one the certificate carries.
    await refused(port, client_tls(pki, pki.client, server_name="shard.example"))
    assert (
        await probe(f"127.0.0.1:{port}", tls=client_tls(pki, pki.client, "localhost")) == "SERVING"
    )


async def test_a_rotated_server_certificate_is_used_for_new_connections(
    shard: ShardApp, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    port = shard.port
    first = pki.server.serial
    assert await asyncio.to_thread(presented_serial, port, pki) == first
    good = client_tls(pki, pki.client)
    # A channel opened before the rotation keeps working through it.
    before = channels.open_channel(f"127.0.0.1:{port}", tls=good)
    try:
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        stub = health_pb2_grpc.HealthStub(before)
        await stub.Check(health_pb2.HealthCheckRequest(), timeout=3)

        # Half a rotation (a new key next to the old certificate): unusable, so the old
        # certificate stays, with one warning.
        new_key_only = pki.ca.issue(pki.dir, "half", cn="shard")
        pki.server.key.write_bytes(new_key_only.key.read_bytes())
        with caplog.at_level(logging.WARNING, logger="groupcoord.tls"):
            assert await asyncio.to_thread(presented_serial, port, pki) == first
            assert await asyncio.to_thread(presented_serial, port, pki) == first
        warnings = [r for r in caplog.records if "cannot be used" in r.getMessage()]
        assert len(warnings) == 1, caplog.text
        assert "does not match" in warnings[0].getMessage()

        # The whole rotation: new connections get the new certificate, no restart.
        rotated = pki.ca.issue(pki.dir, "server", cn="shard")
        assert rotated.serial != first
        assert await asyncio.to_thread(presented_serial, port, pki) == rotated.serial
        assert await list_groups(port, good) == []
        await stub.Check(health_pb2.HealthCheckRequest(), timeout=3)
    finally:
        await before.close()


async def test_a_rotated_ca_admits_the_new_ca_clients(shard: ShardApp, pki: Pki) -> None:
    port = shard.port
    new_ca = Ca("next-ca")
    newcomer = new_ca.issue(pki.dir, "newcomer", cn="bob")
    await refused(port, ClientTls(str(pki.cafile), str(newcomer.cert), str(newcomer.key)))
    # the bundle during a CA rotation: old and new CA
    pki.cafile.write_bytes(pki.ca.pem + new_ca.pem)
    welcome = ClientTls(str(pki.cafile), str(newcomer.cert), str(newcomer.key))
    assert await probe(f"127.0.0.1:{port}", tls=welcome) == "SERVING"
    assert await probe(f"127.0.0.1:{port}", tls=client_tls(pki, pki.client)) == "SERVING"


async def test_the_callers_certificate_subject_is_its_identity(pki: Pki) -> None:
    seen: list[str | None] = []

    async def whoami(raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        seen.append(grpc_peer_subject(context))
        return b""

    for client_auth in ("required", "none"):
        server = GrpcServer("127.0.0.1", 0, tls=server_tls(pki, client_auth))
        server.server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(
                    "test.Who", {"Am": grpc.unary_unary_rpc_method_handler(whoami)}
                )
            ]
        )
        await server.start()
        try:
            tls = client_tls(pki, pki.client)
            async with channels.open_channel(f"127.0.0.1:{server.port}", tls=tls) as ch:
                await ch.unary_unary("/test.Who/Am")(b"", timeout=3)
        finally:
            await server.stop(0)
    # Kafka's default principal builder: User:<the subject DN, most specific first>. A
    # server that does not ask for client certificates (none) has no caller identity.
    assert seen == ["CN=alice,OU=eng,O=acme", None]


def test_bad_files_fail_with_one_line(pki: Pki) -> None:
    missing = str(pki.dir / "nope.crt")
    with pytest.raises(TlsError, match=r"^cannot read the TLS certificate .*nope.crt: No such"):
        ServerTls(missing, str(pki.server.key)).check()
    with pytest.raises(TlsError, match="the private key does not match the certificate"):
        ServerTls(str(pki.server.cert), str(pki.client.key)).check()
    garbage = pki.dir / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(TlsError, match="cannot use the TLS CA bundle"):
        ClientTls(str(garbage)).check()
    with pytest.raises(TlsError, match="needs --tls-cafile"):
        ServerTls(str(pki.server.cert), str(pki.server.key), None, "required")
    with pytest.raises(TlsError, match="both --tls-certfile and --tls-keyfile"):
        ClientTls(str(pki.cafile), str(pki.client.cert))


async def test_the_member_library_joins_over_mutual_tls(shard: ShardApp, pki: Pki) -> None:
    """groupcoord.client's member (issue 43) with a client certificate joins and gets its
    partitions; without one the shard refuses the handshake and the member never joins."""
    from groupcoord.client import GroupMember
    from groupcoord.v1 import catalog_pb2, catalog_pb2_grpc

    address = f"127.0.0.1:{shard.port}"
    tls = client_tls(pki, pki.client, server_name="localhost")
    channel = channels.open_channel(address, tls=tls)
    try:
        await catalog_pb2_grpc.TopicCatalogStub(channel).CreateTopics(
            catalog_pb2.CreateTopicsRequest(
                topics=[catalog_pb2.CreatableTopic(name="tls-orders", num_partitions=2)]
            ),
            timeout=5,
        )
    finally:
        await channel.close()
    async with GroupMember(address, "tls-g", topics=["tls-orders"], tls=tls) as member:
        for _ in range(100):
            if len(member.assignment) == 2:
                break
            await asyncio.sleep(0.05)
        assert {tp.partition for tp in member.assignment} == {0, 1}
    policy = RetryPolicy(deadline_s=1.0, attempt_timeout_s=0.5)
    anonymous = GroupMember(
        address,
        "tls-g",
        topics=["tls-orders"],
        tls=client_tls(pki, None, server_name="localhost"),
        retry=policy,
    )
    with pytest.raises(TimeoutError):
        await anonymous.start(timeout_s=2)
    await anonymous.close()
