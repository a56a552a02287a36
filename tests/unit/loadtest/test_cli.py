"""``groupcoord loadtest`` usage errors: one line, exit 2, before anything is sent."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from loadtest.cli import loadtest


def test_options_may_come_before_the_scenario(tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text('base = "steady"\nmembres = 2\n')
    # `loadtest --scenario FILE ...` reaches the run command (which reads and refuses it)
    r = CliRunner().invoke(loadtest, ["--scenario", str(scenario), "--target", "127.0.0.1:1"])
    assert r.exit_code == 2 and "unknown scenario fields: membres" in r.output, r.output


def test_an_unknown_wire_is_a_usage_error() -> None:
    r = CliRunner().invoke(loadtest, ["steady", "--target", "127.0.0.1:1", "--wire", "amqp"])
    assert r.exit_code == 2 and "'amqp' is not one of 'grpc', 'kafka'" in r.output, r.output


def test_tls_options_are_refused_over_the_kafka_wire(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not read: refused first\n")
    r = CliRunner().invoke(
        loadtest,
        ["steady", "--target", "127.0.0.1:1", "--wire", "kafka", "--tls-cafile", str(ca)],
    )
    assert r.exit_code == 2 and "--wire kafka speaks plaintext Kafka only" in r.output, r.output
