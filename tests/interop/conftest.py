"""Targets for interop tests: groupcoord (``groupcoord dev`` in a child process, Kafka port
on) and Apache Kafka itself (a single-node KRaft broker, skipped without Java/Maven). Both
run with the same short timeouts (``kafka_broker.TEST_SETTINGS``); each lives for the whole
session and tests use their own group and topic names."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.interop.kafka_broker import (
    groupcoord_args,
    kafka_for_tests,
)
from tests.interop.support import Target
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.interop


@pytest.fixture(scope="session")
def groupcoord_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    tmp = tmp_path_factory.mktemp("groupcoord")
    proc = ServerProcess.dev(tmp, *groupcoord_args())
    try:
        if "kafka" not in proc.ports:
            raise RuntimeError(f"no Kafka port printed: {(tmp / 'server.log').read_text()}")
        yield Target("groupcoord", "127.0.0.1", proc.ports["kafka"], log=tmp / "server.log")
    finally:
        proc.kill()


@pytest.fixture(scope="session")
def kafka_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    for broker in kafka_for_tests(tmp_path_factory.mktemp("kafka")):
        yield Target("kafka", "127.0.0.1", broker.port, log=broker.workdir / "kafka.log")


@pytest.fixture
def target(request: pytest.FixtureRequest) -> Target:
    """The server under test, parametrized by ``support.on_both`` (groupcoord and Kafka)."""
    return request.getfixturevalue(f"{request.param}_target")  # type: ignore[no-any-return]
