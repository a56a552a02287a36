"""Every internal gRPC channel is opened through services.process.channels, with a bounded
reconnect backoff (the behaviour itself: tests/integration/test_reconnect.py)."""

from __future__ import annotations

import re
from pathlib import Path

from services.process.channels import (
    MAX_RECONNECT_BACKOFF_MS,
    SERVER_KEEPALIVE_OPTIONS,
    channel_options,
)

SERVICES = Path(__file__).resolve().parents[3] / "services"


def test_backoff_is_bounded_and_extra_options_are_kept() -> None:
    options = dict(channel_options([("grpc.max_receive_message_length", 1024)]))
    assert options["grpc.max_reconnect_backoff_ms"] == MAX_RECONNECT_BACKOFF_MS <= 5_000
    assert options["grpc.initial_reconnect_backoff_ms"] <= MAX_RECONNECT_BACKOFF_MS
    assert options["grpc.min_reconnect_backoff_ms"] <= MAX_RECONNECT_BACKOFF_MS
    assert options["grpc.max_receive_message_length"] == 1024


def test_channels_ping_no_faster_than_every_server_accepts() -> None:
    """Keepalive on every channel, also idle; a server that received pings more often than
    it allows would close the connection (GOAWAY too_many_pings) on every client."""
    client = dict(channel_options())
    server = dict(SERVER_KEEPALIVE_OPTIONS)
    assert client["grpc.keepalive_permit_without_calls"] == 1
    assert server["grpc.keepalive_permit_without_calls"] == 1
    assert (
        server["grpc.http2.min_recv_ping_interval_without_data_ms"]
        <= client["grpc.keepalive_time_ms"]
    )
    # a dead peer found well within a minute
    assert client["grpc.keepalive_time_ms"] + client["grpc.keepalive_timeout_ms"] <= 30_000


def test_no_service_opens_a_channel_of_its_own() -> None:
    direct = re.compile(r"grpc(\.aio)?\.(insecure|secure)_channel\(")
    offenders = [
        str(path.relative_to(SERVICES))
        for path in SERVICES.rglob("*.py")
        if path.name != "channels.py" and direct.search(path.read_text())
    ]
    assert offenders == []
