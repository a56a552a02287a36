"""TLS on every hop between real processes: ``groupcoord assignor``, ``groupcoord shard`` (on
the shared Redis store) and ``groupcoord gateway``, each with its own certificate and mutual
TLS required on every gRPC port; a Kafka client over the gateway's SSL listener (client
certificate required); the CLI and the health probe over mutual TLS. One KIP-848 consumer
group end to end: its assignment is computed by the assignor process (over TLS, counted by
the assignor's metrics), its offsets land on the shard and the CLI lists it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.certs import Ca
from tests.support.metrics import scrape
from tests.support.processes import ROOT, ServerProcess
from tests.support.redis_server import free_port

pytestmark = [pytest.mark.slow, pytest.mark.interop]

PARTITIONS = "4"


def groupcoord(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        cwd=ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_one_consumer_group_over_tls_on_every_hop(tmp_path: Path, redis_url: str) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    ca = Ca()
    cafile = str(ca.write(tmp_path))
    certs = {
        who: ca.issue(tmp_path, who, cn=who, ou="groupcoord")
        for who in ("shard", "assignor", "gateway", "admin", "app")
    }

    def tls(who: str) -> list[str]:
        c = certs[who]
        return ["--tls-cafile", cafile, "--tls-certfile", str(c.cert), "--tls-keyfile", str(c.key)]

    mtls = ["--tls-client-auth", "required"]
    # Ports chosen up front, so that the three processes start side by side (the shard
    # reaches the assignor and the gateway the shard once they are up).
    assignor_port, shard_port = free_port(), free_port()
    store = f"{redis_url}?key_prefix=tls{uuid.uuid4().hex[:8]}"
    gateway_cert = certs["gateway"]
    commands = {
        "assignor": ["assignor", "--grpc-port", str(assignor_port), "--metrics-port", "0",
                     *tls("assignor"), *mtls],
        "shard": ["shard", "--store", store, "--node-id", "0", "--grpc-port", str(shard_port),
                  "--num-partitions", PARTITIONS,
                  "--assignor-addresses", f"127.0.0.1:{assignor_port}",
                  # every target assignment goes to the assignor service
                  # (and members hear of it within half a second)
                  "--set", "consumer_group_inline_assignment_max_size=0,"
                  "consumer_group_min_heartbeat_interval_ms=500,"
                  "consumer_group_heartbeat_interval_ms=500",
                  *tls("shard"), *mtls],
        "gateway": ["gateway", "--shard-address", f"127.0.0.1:{shard_port}", "--kafka-port", "0",
                    "--num-partitions", PARTITIONS, *tls("gateway"),
                    "--security-protocol", "SSL", "--ssl-certfile", str(gateway_cert.cert),
                    "--ssl-keyfile", str(gateway_cert.key), "--ssl-cafile", cafile,
                    "--ssl-client-auth", "required"],
    }  # fmt: skip
    procs: list[ServerProcess] = []
    try:
        with ThreadPoolExecutor(3) as pool:
            futures = {
                name: pool.submit(ServerProcess, args, tmp_path / f"{name}.log")
                for name, args in commands.items()
            }
            for future in futures.values():
                try:
                    procs.append(future.result())
                except RuntimeError:
                    pass  # raised below, after the others are collected for cleanup
            assignor, shard, gateway = (f.result() for f in futures.values())

        # the health probe over mutual TLS: SERVING once the shard holds its partitions
        deadline = time.monotonic() + 30
        while True:
            health = groupcoord("health", shard.grpc_address, *tls("admin"))
            if health.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert health.returncode == 0, health.stdout + health.stderr
        assert "SERVING" in health.stdout

        app = certs["app"]
        config = {
            "bootstrap.servers": f"127.0.0.1:{gateway.ports['kafka']}",
            "security.protocol": "SSL",
            "ssl.ca.location": cafile,
            "ssl.certificate.location": str(app.cert),
            "ssl.key.location": str(app.key),
            "log_level": 0,
        }
        admin = AdminClient(config)
        admin.create_topics([NewTopic("orders", 3, 1)])["orders"].result(10)
        consumer = Consumer(
            {
                **config,
                "group.id": "billing",
                "group.protocol": "consumer",
                "enable.auto.commit": False,
            }  # fmt: skip
        )
        try:
            consumer.subscribe(["orders"])
            deadline = time.monotonic() + 20
            while len(consumer.assignment()) < 3 and time.monotonic() < deadline:
                consumer.poll(0.2)
            assert sorted(tp.partition for tp in consumer.assignment()) == [0, 1, 2]
            consumer.commit(offsets=[TopicPartition("orders", 2, 7)], asynchronous=False)
        finally:
            consumer.close()

        # the assignment was computed by the assignor process, reached over mutual TLS
        assert assignor.metrics_url is not None
        served = scrape(assignor.metrics_url).value(
            "groupcoord_assignor_server_requests_total", outcome="ok"
        )
        assert served >= 1

        # the CLI over mutual TLS sees the group and its offset; without a client certificate
        # the shard refuses it: one line, exit 1 (both run side by side)
        describe = [
            "groups",
            "describe",
            "billing",
            "--bootstrap",
            shard.grpc_address,
            "--num-partitions",
            PARTITIONS,
            "-o",
            "json",
            *tls("admin"),
        ]
        no_cert = [
            "groups",
            "list",
            "--bootstrap",
            shard.grpc_address,
            "--num-partitions",
            PARTITIONS,
            "--tls-cafile",
            cafile,
            "--timeout-ms",
            "2000",
        ]
        with ThreadPoolExecutor(2) as pool:
            described, refused = pool.map(lambda args: groupcoord(*args), [describe, no_cert])
        assert described.returncode == 0, described.stderr
        assert '"orders"' in described.stdout and "7" in described.stdout
        assert refused.returncode == 1, refused.stdout + refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("groupcoord: error: "), refused.stderr
    finally:
        for p in reversed(procs):
            p.kill()


def test_dev_serves_grpc_and_kafka_over_tls(tmp_path: Path) -> None:
    """``groupcoord dev``: mutual TLS on its gRPC port, which its built-in gateway also calls
    (with the same certificate), and an SSL Kafka listener."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    ca = Ca()
    cafile = str(ca.write(tmp_path))
    server, client = ca.issue(tmp_path, "dev", cn="dev"), ca.issue(tmp_path, "ops", cn="ops")
    dev = ServerProcess.dev(
        tmp_path,
        "--num-partitions", PARTITIONS,
        "--tls-certfile", str(server.cert), "--tls-keyfile", str(server.key),
        "--tls-cafile", cafile, "--tls-client-auth", "required",
        "--security-protocol", "SSL",
        "--ssl-certfile", str(server.cert), "--ssl-keyfile", str(server.key),
    )  # fmt: skip
    try:
        config = {
            "bootstrap.servers": f"127.0.0.1:{dev.ports['kafka']}",
            "security.protocol": "SSL",
            "ssl.ca.location": cafile,
            "log_level": 0,
        }
        admin = AdminClient(config)
        admin.create_topics([NewTopic("t", 2, 1)])["t"].result(10)
        consumer = Consumer({**config, "group.id": "g"})
        try:
            consumer.commit(offsets=[TopicPartition("t", 0, 5)], asynchronous=False)
            (got,) = consumer.committed([TopicPartition("t", 0)], timeout=10)
            assert got.offset == 5
        finally:
            consumer.close()
        tls = ["--tls-cafile", cafile, "--tls-certfile", str(client.cert)]
        health = groupcoord("health", dev.grpc_address, *tls, "--tls-keyfile", str(client.key))
        assert health.returncode == 0 and "SERVING" in health.stdout, health.stderr
    finally:
        dev.kill()
