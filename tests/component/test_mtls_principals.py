"""Certificate principals under the authorizer: a gRPC caller with a client certificate
(mutual TLS) is ``User:<subject DN>`` and the ACLs for that principal decide its calls; a
gateway whose own certificate is a trusted gateway principal forwards its SASL clients'
principals over mutual-TLS gRPC, while one whose certificate is not trusted has them
ignored; a Kafka client presenting a certificate on the gateway's SSL listener is
``User:<DN>``. Real shard and gateway apps, certificates made at test time
(tests/support/certs.py), real TLS connections."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from groupcoord.v1 import common_pb2, coordinator_pb2_grpc, offsets_pb2

from services.gateway.sasl import SaslSettings
from services.process.tls import ClientTls, ServerTls, SslListener
from services.rpc.principal import FORWARDED_PRINCIPAL_KEY
from shards.core.errors import Errors
from tests.component.test_acls import create_topics, prepare_store
from tests.support import acl_scenarios as sc
from tests.support.certs import Ca, Issued
from tests.support.gateway import gateway_stack
from tests.support.kafka_wire import KafkaWire

GAF = int(Errors.GROUP_AUTHORIZATION_FAILED)
TAF = int(Errors.TOPIC_AUTHORIZATION_FAILED)

ALICE_DN = "CN=alice,OU=eng,O=acme"
GATEWAY_DN = "CN=gateway,O=acme"


@dataclass
class Pki:
    cafile: Path
    shard: Issued
    gateway: Issued
    #: another gateway certificate from the same CA, not listed as a trusted gateway
    rogue_gateway: Issued
    alice: Issued
    bob: Issued


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = Ca()
    return Pki(
        ca.write(tmp_path),
        ca.issue(tmp_path, "shard", cn="shard"),
        ca.issue(tmp_path, "gateway", cn="gateway", o="acme"),
        ca.issue(tmp_path, "rogue", cn="gateway-2", o="acme"),
        ca.issue(tmp_path, "alice", cn="alice", ou="eng", o="acme"),
        ca.issue(tmp_path, "bob", cn="bob", ou="eng", o="acme"),
    )


def shard_settings(pki: Pki, trusted: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "tls": ServerTls(str(pki.shard.cert), str(pki.shard.key), str(pki.cafile), "required"),
        "authorizer": True,
        "super_users": ("User:admin",),
        "trusted_gateway_principals": trusted,
        "acl_poll_interval_ms": 50,
    }


def commit_request(group: str) -> offsets_pb2.OffsetCommitRequest:
    return offsets_pb2.OffsetCommitRequest(
        group_id=group,
        topics=[
            offsets_pb2.OffsetCommitRequestTopic(
                name="orders",
                partitions=[
                    offsets_pb2.OffsetCommitRequestPartition(partition_index=0, committed_offset=3)
                ],
            )
        ],
        context=common_pb2.RequestContext(client_id="grpc"),
    )


def channel(pki: Pki, port: int, who: Issued) -> grpc.aio.Channel:
    credentials = grpc.ssl_channel_credentials(
        pki.cafile.read_bytes(), who.key.read_bytes(), who.cert.read_bytes()
    )
    return grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials)


def codes(response: Any) -> list[int]:
    return [p.error_code for t in response.topics for p in t.partitions]


async def test_a_grpc_callers_certificate_subject_is_its_principal(
    tmp_path: Path, pki: Pki
) -> None:
    """alice's certificate: the ACLs for ``User:CN=alice,OU=eng,O=acme`` apply (Read on
    the group ``ops-`` prefix and on the topic); bob's certificate: none do; a deny for
    alice's DN on one group wins. A forwarded principal from a caller that is not a
    trusted gateway changes nothing."""
    await prepare_store(
        f"sqlite:///{tmp_path / 'gc.db'}",
        (
            sc.Acl("GROUP", "ops-", f"User:{ALICE_DN}", "READ", pattern="PREFIXED"),
            sc.Acl("GROUP", "ops-locked", f"User:{ALICE_DN}", "READ", "DENY"),
            sc.Acl("TOPIC", "orders", f"User:{ALICE_DN}", "READ"),
            sc.Acl("CLUSTER", "kafka-cluster", "User:*", "CREATE"),
        ),
    )
    gateway = {"grpc_tls": ClientTls(str(pki.cafile), str(pki.gateway.cert), str(pki.gateway.key))}
    async with gateway_stack(tmp_path, gateway=gateway, shard=shard_settings(pki)) as s:
        w = await s.wire()  # the topics, through a gateway (CLUSTER CREATE for everybody)
        try:
            await create_topics(w)
        finally:
            await w.close()
        async with channel(pki, s.shard.port, pki.alice) as alice:
            stub = coordinator_pb2_grpc.GroupCoordinatorStub(alice)
            assert codes(await stub.OffsetCommit(commit_request("ops-1"))) == [0]
            assert codes(await stub.OffsetCommit(commit_request("ops-locked"))) == [GAF]
            assert codes(await stub.OffsetCommit(commit_request("app-1"))) == [GAF]
        async with channel(pki, s.shard.port, pki.bob) as bob:
            stub = coordinator_pb2_grpc.GroupCoordinatorStub(bob)
            assert codes(await stub.OffsetCommit(commit_request("ops-1"))) == [GAF]
            # bob is no trusted gateway: naming alice does not make him alice
            forged = [(FORWARDED_PRINCIPAL_KEY, f"User:{ALICE_DN}")]
            r = await stub.OffsetCommit(commit_request("ops-1"), metadata=forged)
            assert codes(r) == [GAF]


def sasl_gateway(pki: Pki, cert: Issued) -> dict[str, Any]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "security_poll_interval_ms": 50,
        "sasl": SaslSettings(("PLAIN", "SCRAM-SHA-512"), 0),
        "grpc_tls": ClientTls(str(pki.cafile), str(cert.cert), str(cert.key)),
    }


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted", "untrusted"])
async def test_a_gateway_certificate_decides_whether_forwarded_principals_count(
    tmp_path: Path, pki: Pki, trusted: bool
) -> None:
    """The shard trusts ``User:CN=gateway,O=acme`` only. Through the gateway with that
    certificate, alice's SASL principal gets alice's ACLs (Read app-*, orders) and bob's
    none; through a gateway with another certificate of the same CA, alice's principal is
    ignored and the gateway's own (no ACLs) is refused."""
    url = f"sqlite:///{tmp_path / 'gc.db'}"
    await prepare_store(url, (*sc.ACLS, sc.Acl("CLUSTER", "kafka-cluster", "User:*", "CREATE")))
    gateway = sasl_gateway(pki, pki.gateway if trusted else pki.rogue_gateway)
    async with gateway_stack(
        tmp_path,
        gateway={**gateway, "store_url": url},
        shard=shard_settings(pki, (f"User:{GATEWAY_DN}",)),
    ) as s:
        admin = await sc.login("127.0.0.1", s.kafka_port, "admin")
        alice = await sc.login("127.0.0.1", s.kafka_port, "alice")
        bob = await sc.login("127.0.0.1", s.kafka_port, "bob")
        try:
            await create_topics(admin)
            r = await alice.send(sc.commit("app-1", {"orders": 1}))
            assert r.topics[0].partitions[0].error_code == (0 if trusted else GAF)
            r = await bob.send(sc.commit("app-1", {"orders": 1}))
            assert r.topics[0].partitions[0].error_code == GAF
        finally:
            for w in (admin, alice, bob):
                await w.close()


async def tls_wire(port: int, pki: Pki, who: Issued) -> KafkaWire:
    context = ssl.create_default_context(cafile=str(pki.cafile))
    context.load_cert_chain(str(who.cert), str(who.key))
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"
    )
    return KafkaWire(reader, writer, "tls")


async def test_an_ssl_listener_clients_certificate_is_its_principal(
    tmp_path: Path, pki: Pki
) -> None:
    """``--ssl-client-auth required``: alice's certificate makes her ``User:<DN>`` for the
    shard's ACLs (forwarded by the gateway, which the shard trusts by its certificate);
    bob's certificate gets nothing."""
    url = f"sqlite:///{tmp_path / 'gc.db'}"
    await prepare_store(
        url,
        (
            sc.Acl("GROUP", "app-", f"User:{ALICE_DN}", "READ", pattern="PREFIXED"),
            sc.Acl("TOPIC", "orders", f"User:{ALICE_DN}", "READ"),
            sc.Acl("CLUSTER", "kafka-cluster", "User:*", "CREATE"),
        ),
    )
    listener = SslListener(str(pki.gateway.cert), str(pki.gateway.key), str(pki.cafile), "required")
    gateway = {
        "security_protocol": "SSL",
        "listener_tls": listener,
        "grpc_tls": ClientTls(str(pki.cafile), str(pki.gateway.cert), str(pki.gateway.key)),
    }
    async with gateway_stack(
        tmp_path, gateway=gateway, shard=shard_settings(pki, (f"User:{GATEWAY_DN}",))
    ) as s:
        alice = await tls_wire(s.kafka_port, pki, pki.alice)
        bob = await tls_wire(s.kafka_port, pki, pki.bob)
        try:
            await create_topics(alice)
            r = await alice.send(sc.commit("app-1", {"orders": 1}))
            assert r.topics[0].partitions[0].error_code == 0
            r = await alice.send(sc.commit("other-1", {"orders": 1}))
            assert r.topics[0].partitions[0].error_code == GAF
            r = await bob.send(sc.commit("app-1", {"orders": 1}))
            assert r.topics[0].partitions[0].error_code == GAF
        finally:
            for w in (alice, bob):
                await w.close()
