"""The cost of checking a password is bounded (issue 36 item 1), against a real ``groupcoord
dev`` process on a SASL_PLAINTEXT listener: PLAIN logins as a real user with a 500 KiB
password (each cost 1.8-2.5 s of the event loop before: SASLprep and PBKDF2 over the whole
password) and a SCRAM first message with a 500 KiB user name are answered
SASL_AUTHENTICATION_FAILED with a message at once, while a probe client on another
connection is answered without delay; a real login still works.
``bench/sasl_password_stall.py`` measures the probe's latencies."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.support.kafka_wire import KafkaWire, request
from tests.support.processes import ServerProcess, sasl_dev

pytestmark = pytest.mark.slow

HUGE = 500 * 1024  # under the 512 KiB frame limit before authentication
PASSWORD = "alice-secret"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with sasl_dev(tmp_path_factory.mktemp("sasl-cost") / "dev", {"alice": PASSWORD}) as process:
        yield process


async def attempt(port: int, mechanism: str, token: bytes) -> Any:
    w = await KafkaWire.connect("127.0.0.1", port)
    try:
        r = await w.send(request("sasl_handshake", 1, mechanism=mechanism))
        assert r.error_code == ErrorCode.none
        return await w.send(request("sasl_authenticate", 2, auth_bytes=token), timeout=60)
    finally:
        await w.close()


async def probed(port: int, attacks: list[Any]) -> tuple[list[Any], float]:
    """The attacks' answers, and the slowest ApiVersions of a probe connection meanwhile."""
    probe = await KafkaWire.connect("127.0.0.1", port)
    slowest = 0.0
    try:
        await probe.send(
            request("api_versions", 3, client_software_name="p", client_software_version="1")
        )
        running = asyncio.gather(*attacks)
        while not running.done():
            started = time.perf_counter()
            await probe.send(
                request("api_versions", 3, client_software_name="p", client_software_version="1")
            )
            slowest = max(slowest, time.perf_counter() - started)
            await asyncio.sleep(0.01)
        return await running, slowest
    finally:
        await probe.close()


def test_huge_plain_passwords_are_refused_without_stalling_others(dev: ServerProcess) -> None:
    port = dev.ports["kafka"]
    token = b"\0alice\0" + b"x" * HUGE
    answers, slowest = asyncio.run(probed(port, [attempt(port, "PLAIN", token) for _ in range(3)]))
    assert slowest < 0.5, f"a probe waited {slowest:.2f} s"  # (before: 5.7 s)
    for r in answers:
        assert r.error_code == ErrorCode.sasl_authentication_failed
        assert "longer than" in r.error_message


def test_a_huge_scram_user_name_is_refused_without_stalling_others(dev: ServerProcess) -> None:
    port = dev.ports["kafka"]
    token = b"n,,n=" + b"u" * HUGE + b",r=abcdefghijklmnop"
    answers, slowest = asyncio.run(
        probed(port, [attempt(port, "SCRAM-SHA-512", token) for _ in range(3)])
    )
    assert slowest < 0.5, f"a probe waited {slowest:.2f} s"
    for r in answers:
        assert r.error_code == ErrorCode.sasl_authentication_failed
        assert "longer than" in r.error_message


def test_a_real_plain_login_still_works(dev: ServerProcess) -> None:
    r = asyncio.run(attempt(dev.ports["kafka"], "PLAIN", b"\0alice\0" + PASSWORD.encode()))
    assert r.error_code == ErrorCode.none
