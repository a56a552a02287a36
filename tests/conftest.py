"""Fixtures shared by every test suite. Keep this file to fixture registration only: the
logic behind each fixture lives in ``tests/support``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

from tests.support.properties import examples
from tests.support.redis_server import RedisServer, RedisServerUnavailable, start_redis_server

# Speed is the benchmarks' business (bench/), not the tests': no per-example deadline, which a
# loaded 2-core machine exceeds for trivial properties (0.67 s seen for a pure hash check).
# The quick tier scales the number of examples down (tests/support/properties.py).
settings.register_profile("groupcoord", deadline=None, max_examples=examples(100))
settings.load_profile("groupcoord")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real Redis server for the whole run (AOF on, appendfsync always). Tests that
    restart, kill or pause Redis should start their own with ``start_redis_server``."""
    try:
        server = start_redis_server(tmp_path_factory.mktemp("redis"))
    except RedisServerUnavailable as e:
        pytest.fail(str(e), pytrace=False)
    with server:
        yield server


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real Redis Cluster for the whole run: 3 primaries + 3 replicas on loopback (see
    tests/support/redis_cluster.py). Tests that kill or pause nodes start their own."""
    from tests.support.redis_cluster import RedisClusterServers

    try:
        cluster = RedisClusterServers.start(tmp_path_factory.mktemp("redis-cluster"))
    except RedisServerUnavailable as e:
        pytest.fail(str(e), pytrace=False)
    with cluster:
        yield cluster


@pytest.fixture(scope="session")
def redis_cluster_url(redis_cluster: Any) -> str:
    return str(redis_cluster.url)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession (local[2], loopback only) for the whole run."""
    from tests.support.spark import local_spark

    session = local_spark()
    yield session
    session.stop()
