"""The checks a process makes before it starts anything: each problem is one message naming
the option (tests/integration/test_cli_errors.py runs them through the real command)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from services.cli.preflight import check_ports, check_writable_dir


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def message(ex: pytest.ExceptionInfo[click.ClickException]) -> str:
    return ex.value.format_message()


def test_port_in_use_names_its_option(busy_port: int) -> None:
    with pytest.raises(click.ClickException) as ex:
        check_ports("127.0.0.1", [("--grpc-port", 0), ("--kafka-port", busy_port)])
    assert message(ex).startswith(f"--kafka-port {busy_port}: 127.0.0.1:{busy_port} is already")
    assert "0 picks a free one" in message(ex)


def test_free_and_unset_ports_pass() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    check_ports("127.0.0.1", [("--grpc-port", 0), ("--kafka-port", free), ("--metrics-port", None)])


def test_one_port_for_two_options_is_refused() -> None:
    with pytest.raises(click.ClickException) as ex:
        check_ports("127.0.0.1", [("--grpc-port", 45678), ("--kafka-port", 45678)])
    assert message(ex) == "--kafka-port 45678: the same port as --grpc-port; give each its own"


def test_host_that_is_not_this_machines_names_host() -> None:
    with pytest.raises(click.ClickException) as ex:
        check_ports("192.0.2.1", [("--grpc-port", 0)])  # TEST-NET-1: nobody's address
    assert message(ex) == "--host 192.0.2.1: not an address of this machine"


def test_directory_that_cannot_be_made_names_its_option() -> None:
    with pytest.raises(click.ClickException) as ex:
        check_writable_dir("--data-dir", "/proc/nope")
    assert message(ex).startswith("--data-dir /proc/nope: cannot create it (")


def test_store_directory_names_the_url(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(click.ClickException) as ex:
        check_writable_dir("--store", str(tmp_path / "file"), "sqlite:///x/gc.db")
    assert (
        message(ex) == f"--store sqlite:///x/gc.db: directory {tmp_path / 'file'}: not a directory"
    )


def test_writable_directory_is_made_and_left_clean(tmp_path: Path) -> None:
    check_writable_dir("--data-dir", str(tmp_path / "a" / "b"))
    assert list((tmp_path / "a" / "b").iterdir()) == []
