"""Real Kafka clients (confluent-kafka / librdkafka, and Kafka's own Java client) over
SASL_PLAINTEXT and SASL_SSL to ``groupcoord gateway`` processes, users managed with
``groupcoord scram`` in other processes: consumers and the admin client with SCRAM-SHA-512
and with PLAIN, a wrong password, a server certificate the client does not trust, a user
added while the gateway runs; credentials kept in real SQLite, in real Redis and in a real
Redis Cluster.
Certificates are made at test time (tests/support/certs.py).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.interop.clients import QUIET
from tests.interop.support import unique
from tests.support.certs import Ca
from tests.support.processes import ROOT, ServerProcess

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def scram_cli(*args: str, password: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", "scram", *args],
        cwd=ROOT,
        input=None if password is None else password + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )


def add_user(store: str, user: str, password: str, *mechanisms: str) -> None:
    flags = [a for m in mechanisms for a in ("--mechanism", m)]
    r = scram_cli("set", user, "--store", store, "--password-stdin", *flags, password=password)
    assert r.returncode == 0, r.stderr
    assert password not in r.stdout + r.stderr  # never echoed


class SaslStack:
    """A dev server (shard) and a gateway in front of it with SASL; with ``tls`` the
    listener is SASL_SSL (a certificate for 127.0.0.1 from a throwaway CA)."""

    def __init__(self, tmp: Path, credentials_store: str, tls: bool = False) -> None:
        self.store = credentials_store
        self.protocol = "SASL_SSL" if tls else "SASL_PLAINTEXT"
        listener: list[str] = []
        self.cafile: Path | None = None
        if tls:
            ca = Ca()
            self.cafile = ca.write(tmp)
            server = ca.issue(tmp, "gateway", cn="gateway")
            listener = ["--ssl-certfile", str(server.cert), "--ssl-keyfile", str(server.key)]
        self.shard = ServerProcess.dev(tmp / "dev", "--num-partitions", "10")
        try:
            self.gateway = ServerProcess(
                [
                    "gateway",
                    "--shard-address",
                    self.shard.grpc_address,
                    "--kafka-port",
                    "0",
                    "--num-partitions",
                    "10",
                    "--security-protocol",
                    self.protocol,
                    *listener,
                    "--sasl-enabled-mechanisms",
                    "PLAIN,SCRAM-SHA-512",
                    "--store",
                    credentials_store,
                ],
                tmp / "gateway.log",
            )
        except BaseException:
            self.shard.kill()
            raise
        self.bootstrap = f"127.0.0.1:{self.gateway.ports['kafka']}"

    def config(self, mechanism: str, user: str, password: str) -> dict[str, Any]:
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": self.protocol,
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
            **QUIET,
        }
        if self.cafile is not None:
            config["ssl.ca.location"] = str(self.cafile)
            config["ssl.endpoint.identification.algorithm"] = "https"
        return config

    def close(self) -> None:
        self.gateway.kill()
        self.shard.kill()


@pytest.fixture(scope="module", params=["SASL_PLAINTEXT", "SASL_SSL"])
def sqlite_stack(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[SaslStack]:
    tmp = tmp_path_factory.mktemp("sasl")
    # the credentials live in the dev server's own store; the CLI writes them beforehand
    store = f"sqlite:///{tmp / 'dev' / 'data' / 'groupcoord.db'}"
    (tmp / "dev" / "data").mkdir(parents=True)
    add_user(store, "alice", "alice-secret", "SCRAM-SHA-512")
    stack = SaslStack(tmp, store, tls=request.param == "SASL_SSL")
    try:
        yield stack
    finally:
        stack.close()


def exercise(stack: SaslStack, conf: dict[str, Any]) -> None:
    """Admin: create a topic, list/describe groups; a consumer: subscribe, commit, read
    back its committed offset -- all over the authenticated connection."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(conf)
    topic, group = unique("t"), unique("g")
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    consumer = Consumer(
        {**conf, "group.id": group, "enable.auto.commit": False, "group.protocol": "consumer"}
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while not consumer.assignment():
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(0.2)
        consumer.commit(offsets=[TopicPartition(topic, 1, 42)], asynchronous=False)
        (got,) = consumer.committed([TopicPartition(topic, 1)], timeout=10)
        assert got.offset == 42
        listed = admin.list_consumer_groups(request_timeout=10).result(20)
        assert group in {g.group_id for g in listed.valid}
        (described,) = admin.describe_consumer_groups([group], request_timeout=10).values()
        assert len(described.result(20).members) == 1
    finally:
        consumer.close()


def test_scram_sha_512_consumer_and_admin(sqlite_stack: SaslStack) -> None:
    exercise(sqlite_stack, sqlite_stack.config("SCRAM-SHA-512", "alice", "alice-secret"))


def test_plain_consumer_and_admin(sqlite_stack: SaslStack) -> None:
    # PLAIN is checked against the user's SCRAM-SHA-512 credential
    exercise(sqlite_stack, sqlite_stack.config("PLAIN", "alice", "alice-secret"))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_wrong_password_is_an_authentication_error(sqlite_stack: SaslStack, mechanism: str) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    conf = sqlite_stack.config(mechanism, "alice", "not-her-password")
    admin = AdminClient({**conf, "error_cb": errors.append})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    admin.poll(0.5)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


@pytest.mark.parametrize("sqlite_stack", ["SASL_SSL"], indirect=True)
def test_sasl_ssl_with_an_untrusted_server_certificate_fails(
    sqlite_stack: SaslStack, tmp_path: Path
) -> None:
    """A client that trusts another CA refuses the gateway's certificate: the TLS handshake
    fails before any SASL exchange (librdkafka reports _SSL); with the right CA the same
    credentials work."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    assert sqlite_stack.protocol == "SASL_SSL"
    other = Ca("another-ca").write(tmp_path)
    errors: list[Any] = []
    conf = sqlite_stack.config("SCRAM-SHA-512", "alice", "alice-secret")
    admin = AdminClient({**conf, "ssl.ca.location": str(other), "error_cb": errors.append})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)
    deadline = time.monotonic() + 3
    while not errors and time.monotonic() < deadline:
        admin.poll(0.1)
    assert any(e.code() == KafkaError._SSL for e in errors), errors
    assert "certificate verify failed" in " ".join(str(e) for e in errors), errors
    AdminClient(conf).list_topics(timeout=10)  # trusted: fine


@pytest.mark.parametrize("sqlite_stack", ["SASL_PLAINTEXT"], indirect=True)  # either is SASL
def test_users_added_and_deleted_while_the_gateway_runs(sqlite_stack: SaslStack) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    add_user(sqlite_stack.store, "dave", "dave-secret", "SCRAM-SHA-512")
    conf = sqlite_stack.config("SCRAM-SHA-512", "dave", "dave-secret")
    _eventually_authenticates(conf)
    r = scram_cli("delete", "dave", "--store", sqlite_stack.store)
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 10
    while True:
        try:
            AdminClient(conf).list_topics(timeout=3)
        except KafkaException:
            break  # refused now
        assert time.monotonic() < deadline, "a deleted user is still accepted"
        time.sleep(0.3)
    listed = scram_cli("list", "--store", sqlite_stack.store, "--format", "json")
    assert '"alice"' in listed.stdout and "dave" not in listed.stdout
    assert "stored_key" not in listed.stdout and "salt" not in listed.stdout


def _eventually_authenticates(conf: dict[str, Any], timeout: float = 15.0) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    while True:
        try:
            AdminClient(conf).list_topics(timeout=3)
            return
        except KafkaException:
            assert time.monotonic() < deadline, "the new user is never accepted"
            time.sleep(0.3)


def test_credentials_in_redis_are_seen_by_the_gateway_process(
    tmp_path: Path, redis_url: str
) -> None:
    store = f"{redis_url}?key_prefix=sasl{unique('')[-8:]}"
    add_user(store, "erin", "erin-secret", "SCRAM-SHA-512")
    stack = SaslStack(tmp_path, store)
    try:
        exercise(stack, stack.config("SCRAM-SHA-512", "erin", "erin-secret"))
        add_user(store, "frank", "frank-secret", "SCRAM-SHA-512")
        _eventually_authenticates(stack.config("PLAIN", "frank", "frank-secret"))
    finally:
        stack.close()


def test_credentials_in_a_redis_cluster_are_seen_by_the_gateway_process(tmp_path: Path) -> None:
    """The same with the credentials in a real Redis Cluster (3 primaries on loopback, no
    replicas: what is tested here is the gateway reading from a cluster, not replication):
    ``groupcoord scram set`` and the gateway both open the redis+cluster:// URL, and the
    credentials document lives in the slot of one primary."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    from redis.crc import key_slot

    from tests.support.redis_cluster import RedisClusterServers

    with RedisClusterServers.start(tmp_path / "redis", replicas_per_primary=0) as servers:
        store = servers.url
        add_user(store, "grace", "grace-secret", "SCRAM-SHA-512")
        # the document is in the cluster, in a slot not every primary holds
        keys = [
            k
            for s in servers.primaries()
            for k in servers.client(s).keys("gc:doc:*")  # each primary's own keys
        ]
        assert len(keys) == 1, keys
        owner = servers.primary_of_slot(key_slot(keys[0]))
        assert servers.client(owner).exists(keys[0]) == 1
        stack = SaslStack(tmp_path, store)
        try:
            exercise(stack, stack.config("SCRAM-SHA-512", "grace", "grace-secret"))
            errors: list[Any] = []
            bad = {**stack.config("SCRAM-SHA-512", "grace", "wrong"), "error_cb": errors.append}
            admin = AdminClient({**bad, "log_level": 0})
            with pytest.raises(KafkaException):
                admin.list_topics(timeout=2)
            admin.poll(0.5)
            assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
            add_user(store, "heidi", "heidi-secret", "SCRAM-SHA-512")
            _eventually_authenticates(stack.config("PLAIN", "heidi", "heidi-secret"))
            listed = scram_cli("list", "--store", store, "--format", "json")
            assert listed.returncode == 0, listed.stderr
            assert '"grace"' in listed.stdout and '"heidi"' in listed.stdout
        finally:
            stack.close()


def test_scram_cli_usage_errors(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'x.db'}"
    r = scram_cli("set", "u", "--store", store, "--password-stdin", password="")
    assert r.returncode == 2 and "password is empty" in r.stderr
    r = scram_cli("set", "u", "--store", store, "--mechanism", "MD5", "--password-stdin")
    assert r.returncode == 2
    r = scram_cli("set", "u", "--store", store, "--iterations", "100", "--password-stdin")
    assert r.returncode == 2
    r = scram_cli("delete", "nobody", "--store", store)
    assert r.returncode == 1 and "nobody" in r.stderr
    r = scram_cli("list", "--store", store, "--format", "json")
    assert r.returncode == 0 and r.stdout.strip() == "[]"


def _java_properties(
    path: Path, stack: SaslStack, mechanism: str, user: str, password: str
) -> Path:
    module = "scram.ScramLoginModule" if mechanism.startswith("SCRAM") else "plain.PlainLoginModule"
    tls = ""
    if stack.cafile is not None:
        # Kafka's clients read a PEM trust store (KIP-651); the gateway's certificate names
        # 127.0.0.1, and the Java client checks the host name by default ("https")
        tls = f"ssl.truststore.type=PEM\nssl.truststore.location={stack.cafile}\n"
    path.write_text(
        f"security.protocol={stack.protocol}\n" + tls + f"sasl.mechanism={mechanism}\n"
        f"sasl.jaas.config=org.apache.kafka.common.security.{module} required "
        f'username="{user}" password="{password}";\n'
        "request.timeout.ms=10000\n"
        "default.api.timeout.ms=15000\n"
    )
    return path


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_java_client_over_sasl(sqlite_stack: SaslStack, tmp_path: Path, mechanism: str) -> None:
    """Kafka's own Java admin client authenticates (KIP-152 exchange, Kafka's SCRAM client)
    and describes topics by name and by id; with a wrong password it fails with Kafka's
    SaslAuthenticationException."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.interop import java_client

    reason = java_client.unavailable_reason()
    if reason:
        pytest.skip(reason)
    conf = sqlite_stack.config("SCRAM-SHA-512", "alice", "alice-secret")
    topic = unique("java")
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    good = _java_properties(
        tmp_path / "good.properties", sqlite_stack, mechanism, "alice", "alice-secret"
    )
    (described,) = java_client.run(
        sqlite_stack.bootstrap, "describe-by-ids", topic, properties=good
    )
    assert described["name"] == topic and described["partitions"] == 2
    bad = _java_properties(tmp_path / "bad.properties", sqlite_stack, mechanism, "alice", "wrong")
    (failed,) = java_client.run(
        sqlite_stack.bootstrap, "describe-by-ids", topic, properties=bad, expect_failure=True
    )
    assert "SaslAuthenticationException" in failed["stderr"], failed["stderr"][-2000:]


def test_dev_with_sasl_authorizer_and_acl_apis(tmp_path: Path) -> None:
    """``groupcoord dev`` alone: its built-in gateway authenticates with SCRAM against dev's
    own store; the authorizer refuses a user without ACLs and a super user creates ACLs for
    it with the admin client's CreateAcls; then the user commits."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    data = tmp_path / "dev" / "data"
    data.mkdir(parents=True)
    store = f"sqlite:///{data / 'groupcoord.db'}"
    add_user(store, "root", "root-secret", "SCRAM-SHA-512")
    add_user(store, "app", "app-secret", "SCRAM-SHA-512")
    proc = ServerProcess.dev(
        tmp_path / "dev",
        "--security-protocol", "SASL_PLAINTEXT",
        "--sasl-enabled-mechanisms", "SCRAM-SHA-512",
        "--authorizer",
        "--super-users", "User:root",
        "--trusted-gateway-principals", "User:ANONYMOUS",
    )  # fmt: skip
    try:
        bootstrap = f"127.0.0.1:{proc.ports['kafka']}"

        def conf(user: str) -> dict[str, Any]:
            return {
                "bootstrap.servers": bootstrap,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": user,
                "sasl.password": f"{user}-secret",
                **QUIET,
            }

        root = AdminClient(conf("root"))
        root.create_topics([NewTopic("orders", 1, 1)])["orders"].result(30)
        consumer = Consumer({**conf("app"), "group.id": "app-1", "enable.auto.commit": False})
        try:
            # no Describe GROUP: FindCoordinator is refused, so librdkafka finds no coordinator
            # (a synchronous commit would wait ~45 s for one; committed() takes a timeout)
            with pytest.raises(KafkaException):
                consumer.committed([TopicPartition("orders", 0)], timeout=5)
            grants = [
                AclBinding(ResourceType.GROUP, "app-", ResourcePatternType.PREFIXED, "User:app",
                           "*", AclOperation.READ, AclPermissionType.ALLOW),
                AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:app",
                           "*", AclOperation.READ, AclPermissionType.ALLOW),
            ]  # fmt: skip
            for f in root.create_acls(grants).values():
                f.result(30)
            described = root.describe_acls(
                AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:app",
                                 None, AclOperation.ANY, AclPermissionType.ANY)
            ).result(30)  # fmt: skip
            assert sorted(b.name for b in described) == ["app-", "orders"]
            deadline = time.monotonic() + 15
            while True:  # the shard follows the ACLs within its poll interval
                try:
                    consumer.commit(offsets=[TopicPartition("orders", 0, 5)], asynchronous=False)
                    break
                except KafkaException:
                    assert time.monotonic() < deadline, "the new ACLs never applied"
                    time.sleep(0.3)
            (got,) = consumer.committed([TopicPartition("orders", 0)], timeout=10)
            assert got.offset == 5
            app_admin = AdminClient(conf("app"))  # held: a collected client fails its futures
            with pytest.raises(KafkaException) as refused:  # app may not change ACLs
                app_admin.create_acls(grants[:1])[grants[0]].result(30)
            assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        finally:
            consumer.close()
    finally:
        proc.kill()
