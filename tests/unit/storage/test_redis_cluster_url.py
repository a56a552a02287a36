"""Redis Cluster store URLs without a server: seed nodes, TLS and password, groupcoord's own
parameters, and one clear line for a bad URL (never echoing the password)."""

from __future__ import annotations

import pytest

from shards.storage import open_store
from shards.storage.redis_cluster import RedisClusterLogStore, parse_cluster_url


def test_seed_nodes_password_and_own_parameters() -> None:
    parsed = parse_cluster_url(
        "redis+cluster://app:s3cret@h1:7000,h2:7001,[::1]:7002/?key_prefix=x&wait_replicas=1"
        "&wait_timeout_ms=300&health_check_interval=2"
    )
    assert parsed.seeds == (("h1", 7000), ("h2", 7001), ("::1", 7002))
    assert parsed.kwargs["username"] == "app"
    assert parsed.kwargs["password"] == "s3cret"
    assert parsed.kwargs["health_check_interval"] == 2
    assert "ssl" not in parsed.kwargs
    assert "s3cret" not in parsed.shown
    store = RedisClusterLogStore(parsed.shown.replace("***", "pw"))
    assert (store.key_prefix, store._wait_requested, store._wait_timeout_ms) == ("x", 1, 300)
    assert "pw" not in store.description


def test_tls_and_default_port() -> None:
    parsed = parse_cluster_url("rediss+cluster://:pw@h1,h2?ssl_cert_reqs=none")
    assert parsed.seeds == (("h1", 6379), ("h2", 6379))
    assert parsed.kwargs["ssl"] is True
    assert parsed.kwargs["ssl_cert_reqs"] == "none"
    assert parsed.kwargs["password"] == "pw"


def test_open_store_picks_the_cluster_store() -> None:
    assert isinstance(open_store("redis+cluster://127.0.0.1:7000"), RedisClusterLogStore)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+cluster://h1:7000/3", "only database 0"),
        ("redis+cluster://h1:notaport", "bad seed node"),
        ("redis+cluster://h1:7000,,h2:7001", "bad seed node"),
        ("redis+cluster://:pw@h1:99999", "bad seed node"),
        ("redis+cluster://h1:7000?key_prefix={x}", "invalid key prefix"),
        ("redis+cluster://h1:7000?wait_replicas=-1", "wait_replicas"),
    ],
)
def test_bad_urls_are_refused_in_one_line(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        parse_cluster_url(url)
    assert "\n" not in str(raised.value)
    assert "pw" not in str(raised.value)
