"""The compose file's shape (what `docker compose up` starts, and with what), read as YAML:
the parts a real run (tests/integration/deploy, slow) cannot cover on this machine, such as the
profiles whose public images cannot be pulled here."""

from __future__ import annotations

import re
from typing import Any

from tests.support.deploy import ROOT, load_compose

COMPOSE = load_compose()
SERVICES: dict[str, Any] = COMPOSE["services"]


def default(value: str) -> str:
    """``${VAR:-default}`` -> default (what `docker compose up` uses without variables)."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", value)


def test_default_stack_and_profiles() -> None:
    default_services = {n for n, s in SERVICES.items() if not s.get("profiles")}
    assert default_services == {
        "redis", "assignor-1", "assignor-2", "shard-0", "shard-1", "shard-2",
        "gateway-1", "gateway-2",
    }  # fmt: skip
    assert SERVICES["kafka"]["profiles"] == ["proxy"]
    assert SERVICES["otel-collector"]["profiles"] == ["observability"]
    assert SERVICES["prometheus"]["profiles"] == ["observability"]
    cluster = {n for n, s in SERVICES.items() if s.get("profiles") == ["redis-cluster"]}
    assert cluster == {f"redis-cluster-{i}" for i in range(6)} | {"redis-cluster-create"}


def test_public_images_can_be_replaced_by_variables() -> None:
    for service, image in {
        "redis": "redis:7.4",
        "redis-cluster-0": "redis:7.4",
        "redis-cluster-create": "redis:7.4",
        "kafka": "apache/kafka:4.1.1",
        "otel-collector": "otel/opentelemetry-collector:0.115.1",
        "prometheus": "prom/prometheus:v3.1.0",
        "shard-0": "groupcoord:local",
    }.items():
        assert re.fullmatch(r"\$\{[A-Z_]+_IMAGE:-[^}]+\}", SERVICES[service]["image"]), service
        assert default(SERVICES[service]["image"]) == image


def test_redis_is_durable_and_persistent() -> None:
    redis = SERVICES["redis"]
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--appendfsync") + 1] == "always"
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"
    assert redis["volumes"] == ["redis-data:/data"]
    assert "redis-data" in COMPOSE["volumes"]


def test_the_redis_cluster_profile_runs_durable_cluster_nodes_on_their_own_volumes() -> None:
    """What docs/storage.md#redis-cluster asks of a cluster's nodes, on each of the six."""
    volumes = []
    for i in range(6):
        node = SERVICES[f"redis-cluster-{i}"]
        command = node["command"]

        def option(name: str, command: list[str] = command) -> str:
            return str(command[command.index(name) + 1])

        assert option("--appendonly") == "yes"
        assert option("--appendfsync") == "always"
        assert option("--maxmemory-policy") == "noeviction"
        assert option("--cluster-enabled") == "yes"
        assert option("--cluster-require-full-coverage") == "no"
        assert option("--cluster-config-file") == "/data/nodes.conf"
        assert 1000 <= int(option("--cluster-node-timeout")) <= 15000
        assert option("--repl-diskless-sync-delay") == "0"
        (volume,) = node["volumes"]
        assert volume.endswith(":/data")
        volumes.append(volume.split(":")[0])
        assert volumes[-1] in COMPOSE["volumes"]
        assert node["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert len(set(volumes)) == 6
    create = SERVICES["redis-cluster-create"]
    assert create["restart"] == "no"
    assert create["depends_on"] == {
        f"redis-cluster-{i}": {"condition": "service_healthy"} for i in range(6)
    }
    script = " ".join(create["command"]).replace("$$", "$")  # compose's escaping
    assert "redis-cli --cluster create $nodes --cluster-replicas 1 --cluster-yes" in script
    assert "for i in 0 1 2 3 4 5" in script
    # done only once the three replicas are in sync
    assert 'grep -c master_link_status:up)" = 3' in script


def test_start_order_is_health_gated() -> None:
    for shard in ("shard-0", "shard-1", "shard-2"):
        assert SERVICES[shard]["depends_on"]["redis"] == {"condition": "service_healthy"}
    for gateway in ("gateway-1", "gateway-2"):
        depends = SERVICES[gateway]["depends_on"]
        assert {depends[s]["condition"] for s in ("shard-0", "shard-1", "shard-2")} == {
            "service_healthy"
        }
    unchecked = [n for n, s in SERVICES.items() if not s.get("profiles") and "healthcheck" not in s]
    assert unchecked == []


def test_shards_are_distinct_and_share_one_store() -> None:
    shards = [SERVICES[f"shard-{i}"]["environment"] for i in range(3)]
    assert [s["GROUPCOORD_NODE_ID"] for s in shards] == ["0", "1", "2"]
    assert [s["GROUPCOORD_ADVERTISED_HOST"] for s in shards] == ["shard-0", "shard-1", "shard-2"]
    assert {s["GROUPCOORD_STORE"] for s in shards} == {"redis://redis:6379/0"}
    gateway = SERVICES["gateway-1"]["environment"]
    assert gateway["GROUPCOORD_SHARD_ADDRESS"] == "shard-0:50051,shard-1:50051,shard-2:50051"
    assert default(gateway["GROUPCOORD_NUM_PARTITIONS"]) == default(
        shards[0]["GROUPCOORD_NUM_PARTITIONS"]
    )


def test_gateways_publish_the_port_they_listen_on_and_advertise() -> None:
    """Clients reconnect to the advertised host:port, so published and listened ports must be
    the same number: localhost:9092 and localhost:9094 by default."""
    published = set()
    for name in ("gateway-1", "gateway-2"):
        env = SERVICES[name]["environment"]
        port = default(env["GROUPCOORD_KAFKA_PORT"])
        base = int(default(env["GROUPCOORD_BROKER_PORT_BASE"]))
        mappings = [default(p).split(":") for p in SERVICES[name]["ports"]]
        assert ["127.0.0.1", port, port] in mappings
        # proxy mode: upstream broker 1 on base + 1
        assert ["127.0.0.1", str(base + 1), str(base + 1)] in mappings
        assert default(env["GROUPCOORD_ADVERTISED_HOST"]) == "localhost"
        published.add(port)
    assert published == {"9092", "9094"}


def test_observability_configs_scrape_every_process() -> None:
    import yaml

    prometheus = yaml.safe_load((ROOT / "deploy" / "compose" / "prometheus.yml").read_text())
    targets = {
        t
        for job in prometheus["scrape_configs"]
        for c in job["static_configs"]
        for t in c["targets"]
    }
    for name, service in SERVICES.items():
        if "GROUPCOORD_METRICS_PORT" in (service.get("environment") or {}):
            port = service["environment"]["GROUPCOORD_METRICS_PORT"]
            assert f"{name}:{port}" in targets
    collector = yaml.safe_load((ROOT / "deploy" / "compose" / "otel-collector.yaml").read_text())
    assert collector["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"] == "0.0.0.0:4317"


# ---- the TLS overlay (deploy/compose/tls.yml) -------------------------------------------------
def test_the_tls_overlay_gives_every_process_options_the_cli_has(tmp_path: Any) -> None:
    import subprocess

    import yaml

    from services.process.tls import ClientTls, ServerTls, SslListener
    from tests.support.deploy import Invocation, cli_problems

    overlay = yaml.safe_load((ROOT / "deploy" / "compose" / "tls.yml").read_text())
    groupcoord = {n for n, s in SERVICES.items() if s.get("command")}
    groupcoord -= {"redis", "kafka", "otel-collector", "prometheus", "redis-cluster-create"}
    groupcoord -= {n for n in groupcoord if n.startswith("redis-cluster-")}
    assert set(overlay["services"]) == groupcoord
    certs = tmp_path / "certs"
    subprocess.run(
        [str(ROOT / "deploy" / "compose" / "make-certs.sh"), str(certs)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    for name, service in overlay["services"].items():
        command = SERVICES[name]["command"][0]
        env = service["environment"]
        assert cli_problems(Invocation(f"tls.yml/{name}", command, (), frozenset(env))) == []
        (mount,) = service["volumes"]
        assert mount == "./deploy/compose/certs:/etc/groupcoord/tls:ro"

        def local(path: str) -> str:
            return str(certs / path.removeprefix("/etc/groupcoord/tls/"))

        # the files the script makes are the ones the processes are given, and they load
        tls = [local(env[f"GROUPCOORD_TLS_{f}"]) for f in ("CERTFILE", "KEYFILE", "CAFILE")]
        if command == "gateway":
            ClientTls(tls[2], tls[0], tls[1]).check()
            SslListener(local(env["GROUPCOORD_SSL_CERTFILE"]), local(env["GROUPCOORD_SSL_KEYFILE"]))
            assert env["GROUPCOORD_SECURITY_PROTOCOL"] == "SSL"
            # its health port is plaintext: the check drops the client TLS variables
            test = service["healthcheck"]["test"]
            assert test[:2] == ["CMD", "env"] and "groupcoord" in test
            assert {test[i + 1] for i, a in enumerate(test) if a == "-u"} == {
                "GROUPCOORD_TLS_CAFILE",
                "GROUPCOORD_TLS_CERTFILE",
                "GROUPCOORD_TLS_KEYFILE",
            }
        else:
            ServerTls(tls[0], tls[1], tls[2], env["GROUPCOORD_TLS_CLIENT_AUTH"]).check()
    # the internal certificate names every service the processes dial
    from cryptography import x509

    cert = x509.load_pem_x509_certificate((certs / "internal.crt").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    dns = set(names.get_values_for_type(x509.DNSName))
    assert {n for n in SERVICES if n.startswith(("shard-", "assignor-"))} <= dns


# ---- the SASL overlay (deploy/compose/sasl.yml) -----------------------------------------------
def test_the_sasl_overlay_gives_shards_and_gateways_options_the_cli_has() -> None:
    import yaml

    from services.gateway.sasl import parse_mechanisms
    from services.security_cli import parse_principals
    from tests.support.deploy import Invocation, cli_problems

    overlay = yaml.safe_load((ROOT / "deploy" / "compose" / "sasl.yml").read_text())
    shards = {n for n in SERVICES if n.startswith("shard-")}
    gateways = {n for n in SERVICES if n.startswith("gateway-")}
    assert set(overlay["services"]) == shards | gateways | {"scram-admin"}
    for name in shards | gateways:
        command = SERVICES[name]["command"][0]
        env = overlay["services"][name]["environment"]
        assert cli_problems(Invocation(f"sasl.yml/{name}", command, (), frozenset(env))) == []
        assert env["GROUPCOORD_AUTHORIZER"] == "true"
        assert parse_principals(env["GROUPCOORD_SUPER_USERS"], "--super-users") == ("User:admin",)
        if command == "gateway":
            assert default(env["GROUPCOORD_SECURITY_PROTOCOL"]) == "SASL_PLAINTEXT"
            parse_mechanisms(default(env["GROUPCOORD_SASL_ENABLED_MECHANISMS"]))
            # the credentials and ACLs are the shards' store
            assert env["GROUPCOORD_STORE"] == SERVICES["shard-0"]["environment"]["GROUPCOORD_STORE"]
            # the admin user exists before a gateway serves anybody
            depends = overlay["services"][name]["depends_on"]
            assert depends == {"scram-admin": {"condition": "service_completed_successfully"}}
        else:
            trusted = default(env["GROUPCOORD_TRUSTED_GATEWAY_PRINCIPALS"])
            assert parse_principals(trusted, "--trusted-gateway-principals") == ("User:ANONYMOUS",)
    # with tls.yml: the principal the overlay's comment says to trust is the subject of the
    # internal certificate make-certs.sh issues
    text = (ROOT / "deploy" / "compose" / "sasl.yml").read_text()
    (suggested,) = re.findall(r'TRUSTED_GATEWAY_PRINCIPALS="(User:[^"]+)"', text)
    assert suggested == "User:CN=groupcoord,OU=groupcoord,O=groupcoord example"
    script = (ROOT / "deploy" / "compose" / "make-certs.sh").read_text()
    assert 'issue internal "/O=groupcoord example/OU=groupcoord/CN=groupcoord"' in script


def test_the_sasl_overlays_one_shot_service_creates_the_admin_user(tmp_path: Any) -> None:
    """scram-admin's entrypoint and command, run as compose runs them (sh -c, the password in
    the environment) against a SQLite store: the user exists afterwards and the password is
    on no command line."""
    import json
    import os
    import subprocess
    import sys

    import yaml

    overlay = yaml.safe_load((ROOT / "deploy" / "compose" / "sasl.yml").read_text())
    service = overlay["services"]["scram-admin"]
    assert service["depends_on"] == {"redis": {"condition": "service_healthy"}}
    assert "ADMIN_PASSWORD" in service["environment"]
    store = f"sqlite:///{tmp_path / 'gc.db'}"
    command = [store if a == "redis://redis:6379/0" else a for a in service["command"]]
    assert command != service["command"]  # the store URL was there to replace
    entrypoint = [a.replace("$$", "$") for a in service["entrypoint"]]  # compose's escaping
    bin_dir = str(tmp_path / "bin")
    os.mkdir(bin_dir)
    shim = tmp_path / "bin" / "groupcoord"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m services.cli "$@"\n')
    shim.chmod(0o755)
    env = {
        **os.environ,
        "ADMIN_PASSWORD": "s3cret admin",
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
    }
    done = subprocess.run(
        [*entrypoint, *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "s3cret" not in " ".join(service["command"]) + done.stdout + done.stderr
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli",
            "scram",
            "list",
            "--store",
            store,
            "--format",
            "json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    got = sorted((c["user"], c["mechanism"]) for c in json.loads(listed.stdout))
    assert got == [("admin", "SCRAM-SHA-256"), ("admin", "SCRAM-SHA-512")]


# ---- the Redis Cluster overlay (deploy/compose/redis-cluster.yml) ------------------------------
def test_the_redis_cluster_overlay_points_every_shard_at_the_cluster() -> None:
    import yaml

    from shards.storage.redis_cluster import parse_cluster_url

    overlay = yaml.safe_load((ROOT / "deploy" / "compose" / "redis-cluster.yml").read_text())
    stores = {n for n, s in SERVICES.items() if "GROUPCOORD_STORE" in s.get("environment", {})}
    assert set(overlay["services"]) == stores
    for service in overlay["services"].values():
        value = service["environment"]["GROUPCOORD_STORE"]
        # required: compose refuses to start without it rather than fall back to one Redis
        assert re.fullmatch(r"\$\{REDIS_CLUSTER_URL:\?[^}]+\}", value), value
    # the example in the file's comment is a URL the store accepts
    text = (ROOT / "deploy" / "compose" / "redis-cluster.yml").read_text()
    example = re.search(r"REDIS_CLUSTER_URL='([^']+)'", text)
    assert example is not None
    assert len(parse_cluster_url(example.group(1)).seeds) == 3
    # the URL the profile's comment gives names three of the profile's nodes
    compose_text = (ROOT / "docker-compose.yml").read_text()
    (local,) = set(re.findall(r"REDIS_CLUSTER_URL='([^']+)'", compose_text))
    seeds = parse_cluster_url(local).seeds
    assert {f"{host}:{port}" for host, port in seeds} <= {
        f"redis-cluster-{i}:6379" for i in range(6)
    }
    assert len(seeds) == 3
