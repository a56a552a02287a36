"""SASL on the gateway's Kafka listener (SASL_PLAINTEXT), over the wire, against a real shard
and real SQLite: the KIP-152 exchange with PLAIN and SCRAM-SHA-256/512 (scramp as the
client), Kafka's rules before authentication (only ApiVersions/SaslHandshake/
SaslAuthenticate, a 512 KiB frame limit), the delayed answer to a failed authentication,
re-authentication (KIP-368), credentials changed while the gateway runs, and fuzzing of
the unauthenticated path."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import scramp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from services.gateway.sasl import SaslSettings
from shards.security.admin import delete_scram, set_scram
from shards.storage import open_store
from tests.support.gateway import Stack, gateway_stack
from tests.support.kafka_wire import KafkaWire, request
from tests.support.properties import examples

DELAY_MS = 150
LIMIT = 512 * 1024


def sasl_gateway(tmp_path: Path, **sasl: Any) -> dict[str, Any]:
    settings = {"mechanisms": ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")}
    settings |= {"failed_authentication_delay_ms": DELAY_MS, **sasl}
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "store_url": f"sqlite:///{tmp_path / 'gc.db'}",  # the shard's store
        "security_poll_interval_ms": 50,
        "sasl": SaslSettings(**settings),
    }


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with open_store(f"sqlite:///{tmp_path / 'gc.db'}") as store:
        await set_scram(store, "alice", "SCRAM-SHA-256", "alice-secret")
        await set_scram(store, "alice", "SCRAM-SHA-512", "alice-secret")
        await set_scram(store, "bob", "SCRAM-SHA-256", "bob-secret")
    async with gateway_stack(tmp_path, gateway=sasl_gateway(tmp_path)) as s:
        yield s


@pytest.fixture
async def wire(stack: Stack) -> AsyncIterator[KafkaWire]:
    w = await stack.wire()
    try:
        yield w
    finally:
        await w.close()


async def handshake(wire: KafkaWire, mechanism: str, version: int = 1) -> Any:
    return await wire.send(request("sasl_handshake", version, mechanism=mechanism))


async def authenticate(wire: KafkaWire, token: bytes, version: int = 2) -> Any:
    return await wire.send(request("sasl_authenticate", version, auth_bytes=token))


async def plain(wire: KafkaWire, user: str, password: str, version: int = 2) -> Any:
    r = await handshake(wire, "PLAIN")
    assert r.error_code == ErrorCode.none
    return await authenticate(wire, b"\0" + user.encode() + b"\0" + password.encode(), version)


async def scram_login(wire: KafkaWire, mechanism: str, user: str, password: str) -> Any:
    """The whole SCRAM exchange; the last SaslAuthenticate response."""
    r = await handshake(wire, mechanism)
    assert r.error_code == ErrorCode.none, r
    client = scramp.ScramClient([mechanism], user, password)
    first = await authenticate(wire, client.get_client_first().encode())
    if first.error_code != ErrorCode.none:
        return first
    client.set_server_first(first.auth_bytes.decode())
    final = await authenticate(wire, client.get_client_final().encode())
    if final.error_code == ErrorCode.none:
        client.set_server_final(final.auth_bytes.decode())  # the server proved its key too
    return final


def list_groups() -> Any:
    return request("list_groups", 5, states_filter=[], types_filter=[])


# ---- the exchange ----------------------------------------------------------------------


async def test_api_versions_before_authentication_lists_the_sasl_apis(wire: KafkaWire) -> None:
    r = await wire.send(request("api_versions", 0))
    got = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    assert got[17] == (0, 1) and got[36] == (0, 2)


async def test_plain_then_group_apis(wire: KafkaWire) -> None:
    r = await plain(wire, "alice", "alice-secret")
    assert r.error_code == ErrorCode.none and r.error_message is None
    assert r.session_lifetime.total_seconds() == 0  # no re-authentication configured
    groups = await wire.send(list_groups())
    assert groups.error_code == ErrorCode.none


async def test_requests_pipelined_behind_the_authentication_are_answered(
    wire: KafkaWire,
) -> None:
    # all written at once: the group requests arrive while the connection still reads for
    # the authentication, and are served once it is done (services.gateway.inline)
    answers = await wire.send_many(
        [
            request("sasl_handshake", 1, mechanism="PLAIN"),
            request("sasl_authenticate", 2, auth_bytes=b"\0alice\0alice-secret"),
            *(list_groups() for _ in range(3)),
        ]
    )
    assert [a.error_code for a in answers] == [ErrorCode.none] * 5


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_scram_then_group_apis(wire: KafkaWire, mechanism: str) -> None:
    r = await scram_login(wire, mechanism, "alice", "alice-secret")
    assert r.error_code == ErrorCode.none, r
    assert (await wire.send(list_groups())).error_code == ErrorCode.none


async def test_handshake_lists_the_enabled_mechanisms(wire: KafkaWire) -> None:
    r = await handshake(wire, "SCRAM-SHA-512", version=0)
    assert r.error_code == ErrorCode.none
    assert list(r.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


async def failed_late_then_closed(wire: KafkaWire, send: Any) -> Any:
    started = time.monotonic()
    r = await send
    waited = time.monotonic() - started
    assert waited >= DELAY_MS / 1000 * 0.9, f"answered after {waited:.3f} s"
    assert await wire.closed_by_peer()
    return r


@pytest.mark.parametrize(
    ("user", "password"), [("alice", "wrong"), ("nobody", "alice-secret"), ("", "x")]
)
async def test_plain_bad_credentials_fail_late_and_close(
    wire: KafkaWire, user: str, password: str
) -> None:
    await handshake(wire, "PLAIN")
    token = b"\0" + user.encode() + b"\0" + password.encode()
    r = await failed_late_then_closed(wire, authenticate(wire, token))
    assert r.error_code == ErrorCode.sasl_authentication_failed
    assert r.error_message


async def test_plain_with_another_authorization_id_fails(wire: KafkaWire) -> None:
    await handshake(wire, "PLAIN")
    r = await failed_late_then_closed(wire, authenticate(wire, b"bob\0alice\0alice-secret"))
    assert r.error_code == ErrorCode.sasl_authentication_failed
    assert "authorization id" in r.error_message


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [
        ("SCRAM-SHA-512", "alice", "wrong"),
        ("SCRAM-SHA-512", "bob", "bob-secret"),  # bob has SCRAM-SHA-256 only
        ("SCRAM-SHA-256", "nobody", "x"),
    ],
)
async def test_scram_bad_credentials_fail_late_and_close(
    wire: KafkaWire, mechanism: str, user: str, password: str
) -> None:
    r = await failed_late_then_closed(wire, scram_login(wire, mechanism, user, password))
    assert r.error_code == ErrorCode.sasl_authentication_failed
    assert mechanism in r.error_message


@pytest.mark.parametrize(
    ("token", "why"),
    [
        (b"\0alice\0" + b"x" * 1025, "the password is longer than 1024 bytes"),
        (b"\0" + b"u" * 1021 + b"\0secret", "the user name is longer than 255 characters"),
    ],
)
async def test_an_oversized_plain_token_fails_at_once(
    wire: KafkaWire, token: bytes, why: str
) -> None:
    """Refused before any work (SASLprep and PBKDF2 cost in proportion to the password):
    Kafka's error, a message saying why, the usual delay, then closed."""
    await handshake(wire, "PLAIN")
    r = await failed_late_then_closed(wire, authenticate(wire, token))
    assert r.error_code == ErrorCode.sasl_authentication_failed
    assert r.error_message == f"Authentication failed: {why}"


async def test_an_oversized_scram_message_fails_at_once(wire: KafkaWire) -> None:
    await handshake(wire, "SCRAM-SHA-512")
    token = b"n,,n=" + b"u" * 9000 + b",r=abcdef"
    r = await failed_late_then_closed(wire, authenticate(wire, token))
    assert r.error_code == ErrorCode.sasl_authentication_failed
    assert "longer than 8192 bytes" in r.error_message


async def test_one_hosts_failures_take_turns(stack: Stack) -> None:
    """Failed checks from one host are spaced by the failed-authentication delay however
    many connections it opens (each failure keeps the host's turn that long), and a good
    login from the same host waits its turn, then succeeds."""
    wires = [await stack.wire() for _ in range(4)]
    try:
        started = time.monotonic()
        for w in wires:
            await handshake(w, "PLAIN")
        bad = [authenticate(w, b"\0alice\0wrong") for w in wires[:3]]
        answers = await asyncio.gather(*bad, plain_after(wires[3]))
        elapsed = time.monotonic() - started
        assert [a.error_code for a in answers[:3]] == [ErrorCode.sasl_authentication_failed] * 3
        assert answers[3].error_code == ErrorCode.none
        assert elapsed >= 3 * DELAY_MS / 1000  # three failures, one after another
        assert stack.gateway.sasl is not None and stack.gateway.sasl.turns.waiting("127.0.0.1") == 0
    finally:
        for w in wires:
            await w.close()


async def plain_after(wire: KafkaWire) -> Any:
    await asyncio.sleep(0.02)  # (behind the failures in the host's line)
    return await authenticate(wire, b"\0alice\0alice-secret")


async def test_plain_checks_the_scram_sha_256_credential_when_there_is_no_512(
    wire: KafkaWire,
) -> None:
    assert (await plain(wire, "bob", "bob-secret")).error_code == ErrorCode.none


async def test_unsupported_mechanism_fails_late_and_closes(wire: KafkaWire) -> None:
    r = await failed_late_then_closed(wire, handshake(wire, "GSSAPI"))
    assert r.error_code == ErrorCode.unsupported_sasl_mechanism
    assert list(r.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


# ---- before authentication ---------------------------------------------------------------


@pytest.mark.parametrize(
    "req",
    [
        request("metadata", 12, topics=None),
        request("list_groups", 4, states_filter=[]),
        request("find_coordinator", 4, key_type=0, coordinator_keys=["g"]),
        request("offset_fetch", 9, groups=[{"group_id": "g", "topics": None}]),
    ],
    ids=["metadata", "list_groups", "find_coordinator", "offset_fetch"],
)
async def test_other_apis_before_authentication_close(wire: KafkaWire, req: Any) -> None:
    await wire.write_raw(_frame(req))
    assert await wire.closed_by_peer()


async def test_other_apis_after_the_handshake_but_before_authentication_close(
    wire: KafkaWire,
) -> None:
    await handshake(wire, "PLAIN")
    await wire.write_raw(_frame(list_groups()))
    assert await wire.closed_by_peer()


async def test_authenticate_before_handshake_closes(wire: KafkaWire) -> None:
    await wire.write_raw(_frame(request("sasl_authenticate", 2, auth_bytes=b"\0a\0b")))
    assert await wire.closed_by_peer()


async def test_frame_above_the_pre_authentication_limit_closes_unread(wire: KafkaWire) -> None:
    await wire.write_raw(struct.pack(">i", LIMIT + 1))  # announced only: nothing follows
    assert await wire.closed_by_peer()


async def test_the_full_limit_applies_after_authentication(wire: KafkaWire) -> None:
    assert (await plain(wire, "alice", "alice-secret")).error_code == ErrorCode.none
    big_id = "m" * (LIMIT + 1000)  # a JoinGroup member id larger than the pre-auth limit
    r = await wire.send(
        request(
            "heartbeat", 4, group_id="g", generation_id=1, member_id=big_id, group_instance_id=None
        )
    )
    assert r.error_code != ErrorCode.none  # answered (by the shard), not closed


def _frame(req: Any, correlation_id: int = 99) -> bytes:
    from tests.support.kafka_wire import encode_request

    return encode_request(req, correlation_id, "wire")


# ---- credentials change while the gateway runs -------------------------------------------


async def test_credentials_changed_in_the_store_are_followed(stack: Stack, tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path / 'gc.db'}") as store:
        await set_scram(store, "carol", "SCRAM-SHA-512", "carol-1")
        await asyncio.sleep(0.3)  # > the poll interval
        w = await stack.wire()
        assert (await scram_login(w, "SCRAM-SHA-512", "carol", "carol-1")).error_code == 0
        await w.close()
        await set_scram(store, "carol", "SCRAM-SHA-512", "carol-2")
        assert await delete_scram(store, "bob")
        await asyncio.sleep(0.3)
    for user, password in [("carol", "carol-1"), ("bob", "bob-secret")]:
        w = await stack.wire()
        r = await plain(w, user, password)
        assert r.error_code == ErrorCode.sasl_authentication_failed, user
        await w.close()
    w = await stack.wire()
    assert (await plain(w, "carol", "carol-2")).error_code == ErrorCode.none
    await w.close()


# ---- listeners without SASL ------------------------------------------------------------------


async def test_plaintext_listener_answers_sasl_apis_illegal_state(tmp_path: Path) -> None:
    async with gateway_stack(tmp_path) as s:
        w = await s.wire()
        try:
            r = await handshake(w, "PLAIN")
            assert r.error_code == ErrorCode.illegal_sasl_state
            r = await authenticate(w, b"\0a\0b")
            assert r.error_code == ErrorCode.illegal_sasl_state
            assert (await w.send(list_groups())).error_code == ErrorCode.none
        finally:
            await w.close()


async def test_after_authentication_without_reauth_sasl_apis_are_illegal_state(
    wire: KafkaWire,
) -> None:
    assert (await plain(wire, "alice", "alice-secret")).error_code == ErrorCode.none
    assert (await handshake(wire, "PLAIN")).error_code == ErrorCode.illegal_sasl_state
    assert (await wire.send(list_groups())).error_code == ErrorCode.none


# ---- re-authentication (KIP-368) ---------------------------------------------------------


@pytest.fixture
async def reauth_stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with open_store(f"sqlite:///{tmp_path / 'gc.db'}") as store:
        await set_scram(store, "alice", "SCRAM-SHA-512", "alice-secret")
        await set_scram(store, "bob", "SCRAM-SHA-512", "bob-secret")
    async with gateway_stack(tmp_path, gateway=sasl_gateway(tmp_path, reauth_ms=500)) as s:
        yield s


async def test_session_lifetime_and_expiry_close_the_connection(reauth_stack: Stack) -> None:
    w = await reauth_stack.wire()
    r = await plain(w, "alice", "alice-secret")
    assert r.session_lifetime.total_seconds() == 0.5
    assert (await w.send(list_groups())).error_code == ErrorCode.none
    await asyncio.sleep(0.6)
    await w.write_raw(_frame(list_groups()))
    assert await w.closed_by_peer()


async def test_reauthentication_extends_the_session(reauth_stack: Stack) -> None:
    w = await reauth_stack.wire()
    assert (await scram_login(w, "SCRAM-SHA-512", "alice", "alice-secret")).error_code == 0
    for _ in range(3):
        await asyncio.sleep(0.3)
        r = await scram_login(w, "SCRAM-SHA-512", "alice", "alice-secret")
        assert r.error_code == ErrorCode.none and r.session_lifetime.total_seconds() == 0.5
        assert (await w.send(list_groups())).error_code == ErrorCode.none  # 0.9 s in
    await w.close()


async def test_reauthentication_as_another_principal_fails_and_closes(
    reauth_stack: Stack,
) -> None:
    w = await reauth_stack.wire()
    assert (await plain(w, "alice", "alice-secret")).error_code == ErrorCode.none
    r = await failed_late_then_closed(w, plain(w, "bob", "bob-secret"))
    assert r.error_code == ErrorCode.sasl_authentication_failed


async def test_reauthentication_with_another_mechanism_fails_and_closes(
    reauth_stack: Stack,
) -> None:
    w = await reauth_stack.wire()
    assert (await plain(w, "alice", "alice-secret")).error_code == ErrorCode.none
    r = await failed_late_then_closed(w, handshake(w, "SCRAM-SHA-512"))
    assert r.error_code == ErrorCode.unsupported_sasl_mechanism


# ---- fuzzing the unauthenticated path ----------------------------------------------------

PRE_AUTH_KEYS = {17, 18, 36}


def _tagged(key: int, req: Any) -> bytes:
    """A request frame (size included) whose correlation id names its API key."""
    return _frame(req, correlation_id=key * 1000 + 1)  # (size prefixed)


#: requests that would leave a trace in the coordinator if they reached it
_GROUP_REQUESTS = [
    (
        8,
        request(
            "offset_commit",
            9,
            group_id="fuzz",
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 5,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        ),
    ),
    (
        68,
        request(
            "consumer_group_heartbeat",
            0,
            group_id="fuzz",
            member_id="m1",
            member_epoch=0,
            instance_id=None,
            rack_id=None,
            rebalance_timeout=30000,
            subscribed_topic_names=["t"],
            server_assignor=None,
            topic_partitions=[],
        ),
    ),
    (
        19,
        request(
            "create_topics",
            7,
            topics=[
                {
                    "name": "fuzz",
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            timeout=1000,
            validate_only=False,
        ),
    ),
]

chunks = st.one_of(
    # random header + body for any API key (the correlation id names the key)
    st.builds(
        lambda key, version, body: (lambda f: struct.pack(">i", len(f)) + f)(
            struct.pack(">hhih", key, version, max(key, 0) * 1000 + 1, -1) + body
        ),
        st.integers(-1, 100),
        st.integers(-1, 20),
        st.binary(max_size=64),
    ),
    st.builds(
        lambda token, v: _tagged(36, request("sasl_authenticate", v, auth_bytes=token)),
        st.binary(max_size=200),
        st.integers(0, 2),
    ),
    st.builds(
        lambda m, v: _tagged(17, request("sasl_handshake", v, mechanism=m)),
        st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "", "x" * 300]),
        st.integers(0, 1),
    ),
    st.sampled_from(_GROUP_REQUESTS).map(lambda kr: _tagged(*kr)),
    st.just(_tagged(18, request("api_versions", 0))),
    # a size above the limit, announced only
    st.integers(LIMIT + 1, 2**31 - 1).map(lambda n: struct.pack(">i", n)),
    st.binary(min_size=1, max_size=16),
)


@given(script=st.lists(chunks, min_size=1, max_size=6))
@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
async def test_unauthenticated_clients_reach_no_group_api_and_leak_nothing(
    stack: Stack, script: list[bytes]
) -> None:
    w = await stack.wire()
    try:
        aligned = True  # every chunk so far was whole frames
        must_close = False
        for chunk in script:
            if len(chunk) == 4 and struct.unpack(">i", chunk)[0] > LIMIT:
                must_close = must_close or aligned
            elif not _is_frames(chunk):
                aligned = False
            try:
                await w.write_raw(chunk)
            except (ConnectionError, OSError):
                break
        ids, closed = await _answers(w)
        # every answer is to ApiVersions, SaslHandshake or SaslAuthenticate
        for correlation_id in ids:
            assert correlation_id // 1000 in PRE_AUTH_KEYS, correlation_id
        if must_close:
            # refused on the announced size alone: nothing of that frame is awaited
            assert closed, "a frame above the pre-authentication limit must close"
    finally:
        await w.close()
    # no connection is left behind once its client is gone
    server = stack.gateway.server
    assert server is not None
    deadline = time.monotonic() + 5
    while server.connections:
        assert time.monotonic() < deadline, "connections leaked"
        await asyncio.sleep(0.01)
    # and nothing reached the coordinator
    w = await _authenticated(stack)
    try:
        assert list((await w.send(list_groups())).groups) == []
        md = await w.send(request("metadata", 12, topics=None))
        assert [t.name for t in md.topics] == []
    finally:
        await w.close()


async def _authenticated(stack: Stack) -> KafkaWire:
    w = await stack.wire()
    assert (await plain(w, "alice", "alice-secret")).error_code == ErrorCode.none
    return w


async def _answers(w: KafkaWire) -> tuple[list[int], bool]:
    """The correlation ids of the response frames until the server is quiet (False) or
    closes (True)."""
    ids: list[int] = []
    try:
        while True:
            frame = await asyncio.wait_for(w.read_frame(), 0.5 + DELAY_MS / 1000)
            ids.append(struct.unpack_from(">i", frame)[0])
    except TimeoutError:
        return ids, False
    except (asyncio.IncompleteReadError, ConnectionError):
        return ids, True


def _is_frames(chunk: bytes) -> bool:
    """Whether ``chunk`` is a sequence of whole size-prefixed frames."""
    pos = 0
    while pos + 4 <= len(chunk):
        size = struct.unpack_from(">i", chunk, pos)[0]
        if size < 0:
            return False
        pos += 4 + size
    return pos == len(chunk)
