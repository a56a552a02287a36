"""The targets the proxy-mode benchmarks compare, started once for a whole benchmark: an
Apache Kafka broker (tests/interop/kafka_broker.py's version), a ``groupcoord dev`` shard
(SQLite) following it, and a separate ``groupcoord gateway --upstream-bootstrap <kafka>`` in
front of that shard. Yields their Kafka addresses: ``gateway`` (the separate gateway),
``dev`` (the shard's own Kafka port: its built-in gateway) and ``kafka`` (the broker)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.interop.kafka_broker import KafkaBroker, groupcoord_args
from tests.support.processes import ServerProcess, gateway_process


@contextmanager
def proxy_targets(work: Path) -> Iterator[dict[str, str]]:
    with KafkaBroker(work / "kafka") as kafka:
        upstream = kafka.bootstrap
        with ServerProcess.dev(
            work / "dev", "--upstream-bootstrap", upstream, *groupcoord_args()
        ) as dev:
            gateway = gateway_process(
                dev.grpc_address, 10, work / "gateway.log", "--upstream-bootstrap", upstream
            )
            try:
                yield {
                    "gateway": f"127.0.0.1:{gateway.ports['kafka']}",
                    "dev": f"127.0.0.1:{dev.ports['kafka']}",
                    "kafka": upstream,
                }
            finally:
                gateway.kill()


def rotated(names: list[str], round_: int) -> list[str]:
    """The order of the targets in round ``round_``: each goes first in turn."""
    k = round_ % len(names)
    return names[k:] + names[:k]
