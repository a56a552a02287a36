"""``open_store``: which URL gives which backend, and clear errors for the rest."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shards.storage import open_store, sqlite_path_from_url
from shards.storage.redis import RedisLogStore
from shards.storage.sqlite import SqliteLogStore


def test_sqlite_urls_follow_the_three_and_four_slash_convention() -> None:
    assert sqlite_path_from_url("sqlite:///data/coord.db") == "data/coord.db"
    assert sqlite_path_from_url("sqlite:////var/lib/coord.db") == "/var/lib/coord.db"
    assert sqlite_path_from_url("sqlite:///my%20dir/coord.db") == "my dir/coord.db"


@pytest.mark.parametrize(
    "url",
    ["sqlite://", "sqlite:///", "sqlite:////tmp/dir/", "sqlite:///:memory:", "sqlite://host/x.db"],
)
def test_sqlite_urls_without_a_file_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match="SQLite URL"):
        open_store(url)


async def test_relative_sqlite_url_is_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store("sqlite:///nested/dir/coord.db")
    assert isinstance(store, SqliteLogStore)
    async with store:
        pass
    assert os.path.isfile(tmp_path / "nested" / "dir" / "coord.db")


async def test_absolute_sqlite_url(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'x' / 'coord.db'}")  # sqlite:////tmp/...
    assert isinstance(store, SqliteLogStore)
    async with store:
        pass
    assert (tmp_path / "x" / "coord.db").is_file()


def test_redis_urls_give_a_redis_store_with_the_key_prefix() -> None:
    store = open_store("redis://:hunter2@cache.example:6380/3?key_prefix=prod")
    assert isinstance(store, RedisLogStore)
    assert store.key_prefix == "prod"
    assert "hunter2" not in store.description
    default = open_store("redis://localhost:6379/0")
    assert isinstance(default, RedisLogStore) and default.key_prefix == "gc"


@pytest.mark.parametrize(
    "url", ["postgres://db/x", "memory://", "", "/var/lib/coord.db", "http://user:pw@host/"]
)
def test_other_urls_are_refused_clearly(url: str) -> None:
    with pytest.raises(ValueError, match="unsupported store URL") as caught:
        open_store(url)
    assert "pw@" not in str(caught.value)
