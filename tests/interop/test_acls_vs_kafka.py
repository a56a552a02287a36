"""ACLs side by side with Apache Kafka: one Kafka broker (4.4.0 by default) with the
StandardAuthorizer and a SASL_PLAINTEXT listener (PLAIN users from JAAS), and groupcoord (a
SASL gateway in front of a shard with the authorizer on), given the same users, topics and
ACLs; the same requests (tests/support/acl_scenarios.py) must get the same error codes, names
and authorized operations from both. One broker start for all of it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.component.test_acls import create_topics, prepare_store, stack_settings
from tests.interop.kafka_broker import (
    KafkaNode,
    KafkaUnavailable,
    format_storage,
    free_port,
    random_cluster_id,
    server_properties,
    unavailable_reason,
    wait_ready,
)
from tests.support import acl_scenarios as sc
from tests.support.gateway import gateway_stack

pytestmark = [pytest.mark.interop, pytest.mark.slow]


class SaslKafka:
    def __init__(self, node: KafkaNode, plain_port: int, sasl_port: int) -> None:
        self.node = node
        self.plain_port = plain_port
        self.sasl_port = sasl_port


def _jaas() -> str:
    users = " ".join(f'user_{u}="{p}"' for u, p in sc.PASSWORDS.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslKafka]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("kafka-acl")
    port, sasl_port, controller = free_port(), free_port(), free_port()
    props = server_properties(
        node_id=1,
        roles="broker,controller",
        port=port,
        controller_port=controller,
        voters=f"1@127.0.0.1:{controller}",
        data=workdir / "data",
        extra={
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # the PLAINTEXT and controller listeners (readiness probe, setup) are ANONYMOUS
            "super.users": "User:admin;User:ANONYMOUS",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": _jaas(),
        },
    )
    props["listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    # the PLAINTEXT listener last: KafkaNode.port (the probe's) is the last advertised one
    props["advertised.listeners"] = (
        f"SASL_PLAINTEXT://127.0.0.1:{sasl_port},PLAINTEXT://127.0.0.1:{port}"
    )
    props["listener.security.protocol.map"] += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
    node = KafkaNode(workdir, props, "768m")
    try:
        format_storage([node], random_cluster_id())
        node.launch()
        wait_ready([node], 120)
    except KafkaUnavailable as ex:
        node.terminate()
        pytest.fail(f"Apache Kafka could not be started: {ex}", pytrace=False)
    try:
        yield SaslKafka(node, port, sasl_port)
    finally:
        node.terminate()


def _prepare_kafka(k: SaslKafka) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{k.plain_port}", "log_level": 3})
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in sc.TOPICS]).values():
        f.result(30)
    bindings = [
        AclBinding(
            ResourceType[a.resource_type],
            a.name,
            ResourcePatternType[a.pattern],
            a.principal,
            "*",
            AclOperation[a.operation],
            AclPermissionType[a.permission],
        )
        for a in sc.ACLS
    ]
    for f in admin.create_acls(bindings).values():
        f.result(30)


async def _kafka_outcomes(k: SaslKafka) -> dict[str, Any]:
    def connect(user: str) -> Any:
        return sc.login("127.0.0.1", k.sasl_port, user)

    await sc.setup_groups(connect)
    return {
        **await sc.run_scenarios(connect),
        **await sc.run_acl_admin(connect),
        "api versions": await _acl_api_versions(connect),
    }


async def _groupcoord_outcomes(tmp_path: Path) -> dict[str, Any]:
    await prepare_store(f"sqlite:///{tmp_path / 'gc.db'}")
    settings = stack_settings(tmp_path, ("User:ANONYMOUS",))
    settings["gateway"] |= {"authorizer": True, "super_users": ("User:admin",)}
    async with gateway_stack(tmp_path, **settings) as s:
        admin = await sc.login("127.0.0.1", s.kafka_port, "admin")
        await create_topics(admin)
        await admin.close()

        def connect(user: str) -> Any:
            return sc.login("127.0.0.1", s.kafka_port, user)

        await sc.setup_groups(connect)
        return {
            **await sc.run_scenarios(connect),
            **await sc.run_acl_admin(connect),
            "api versions": await _acl_api_versions(connect),
        }


async def _acl_api_versions(connect: Any) -> dict[int, tuple[int, int]]:
    w = await connect("alice")
    try:
        r = await w.send(
            sc.request("api_versions", 3, client_software_name="t", client_software_version="1")
        )
    finally:
        await w.close()
    return {
        k.api_key: (k.min_version, k.max_version)
        for k in r.api_keys
        if k.api_key in (17, 29, 30, 31, 36)
    }


def test_same_requests_get_the_same_answers_as_kafka(kafka: SaslKafka, tmp_path: Path) -> None:
    _prepare_kafka(kafka)
    expected = asyncio.run(_kafka_outcomes(kafka))
    got = asyncio.run(_groupcoord_outcomes(tmp_path))
    assert set(got) == set(expected)
    differences = {n: (got[n], expected[n]) for n in expected if got[n] != expected[n]}
    assert not differences, "groupcoord vs Kafka: " + repr(differences)


# ---- proxy mode: the gateway talks SASL to the upstream with its own credentials ---------


def test_proxy_mode_authenticates_to_a_sasl_upstream(kafka: SaslKafka, tmp_path: Path) -> None:
    """``groupcoord dev`` in front of the SASL listener as ``admin``, its own clients
    authenticated by the gateway with SCRAM-SHA-512 (their SASL exchange is not forwarded):
    they produce and consume through it; with a wrong upstream password nothing is reached."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.interop.clients import QUIET
    from tests.interop.support import unique
    from tests.support.processes import ServerProcess

    args = [
        "--upstream-bootstrap",
        f"127.0.0.1:{kafka.sasl_port}",
        "--upstream-security-protocol",
        "SASL_PLAINTEXT",
        "--upstream-sasl-mechanism",
        "PLAIN",
        "--upstream-sasl-username",
        "admin",
        "--num-partitions",
        "10",
        "--upstream-metadata-interval-ms",
        "200",
    ]
    from tests.interop.test_sasl_clients import add_user

    (tmp_path / "proxy" / "data").mkdir(parents=True)
    add_user(
        f"sqlite:///{tmp_path / 'proxy' / 'data' / 'groupcoord.db'}",
        "client",
        "client-secret",
        "SCRAM-SHA-512",
    )
    proc = ServerProcess.dev(
        tmp_path / "proxy",
        *args,
        "--security-protocol",
        "SASL_PLAINTEXT",
        "--sasl-enabled-mechanisms",
        "SCRAM-SHA-512",
        env={"GROUPCOORD_UPSTREAM_SASL_PASSWORD": "admin-secret"},
    )
    try:
        client = {
            "bootstrap.servers": f"127.0.0.1:{proc.ports['kafka']}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "client",
            "sasl.password": "client-secret",
            **QUIET,
        }
        topic, group = unique("proxied"), unique("g")
        admin = AdminClient(client)
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        producer = Producer(client)
        for i in range(3):
            producer.produce(topic, value=b"v%d" % i)
        assert producer.flush(30) == 0
        consumer = Consumer(
            {
                **client,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.subscribe([topic])
            seen: list[bytes] = []
            deadline = time.monotonic() + 60
            while len(seen) < 3:
                assert time.monotonic() < deadline, f"consumed only {seen}"
                m = consumer.poll(0.5)
                if m is not None and m.error() is None:
                    seen.append(m.value())
            # the shard's topic catalog learns the new topic from the upstream (over SASL too)
            deadline = time.monotonic() + 30
            while True:
                try:
                    consumer.commit(asynchronous=False)
                    break
                except KafkaException:
                    assert time.monotonic() < deadline, "the topic never reached the catalog"
                    time.sleep(0.3)
            (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
            assert sorted(seen) == [b"v0", b"v1", b"v2"] and committed.offset == 3
        finally:
            consumer.close()
    finally:
        proc.kill()

    bad = ServerProcess.dev(
        tmp_path / "bad", *args, env={"GROUPCOORD_UPSTREAM_SASL_PASSWORD": "wrong"}
    )
    try:
        time.sleep(3)
        log = (tmp_path / "bad" / "server.log").read_text()
        assert "SASL authentication as 'admin' failed" in log, log[-2000:]
    finally:
        bad.kill()
