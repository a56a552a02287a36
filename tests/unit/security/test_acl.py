"""The authorizer's decisions (Kafka's StandardAuthorizer rules), the ACL document codec,
SCRAM credentials and PLAIN verification against them."""

from __future__ import annotations

import pytest
import scramp
from hypothesis import given
from hypothesis import strategies as st

from shards.core.api import AclOperation
from shards.security.acl import (
    ALL,
    AclBinding,
    AclError,
    Acls,
    Authorizer,
    PatternType,
    Permission,
    ResourceType,
)
from shards.security.credentials import (
    CredentialError,
    Credentials,
    make_credential,
    verify_password,
)

G, T, C = ResourceType.GROUP, ResourceType.TOPIC, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
R, D, DEL = AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE


def b(
    rt: ResourceType,
    name: str,
    principal: str,
    op: int,
    permission: Permission = ALLOW,
    pattern: PatternType = LIT,
    host: str = "*",
) -> AclBinding:
    return AclBinding(rt, pattern, name, principal, host, op, permission)


def auth(*bindings: AclBinding, super_users: tuple[str, ...] = ()) -> Authorizer:
    return Authorizer(Acls(1, bindings), super_users)


def test_no_acl_denies() -> None:
    assert not auth().authorize("User:alice", R, G, "g")


def test_literal_prefixed_and_wildcard_resources() -> None:
    a = auth(
        b(G, "g1", "User:alice", R),
        b(G, "team-", "User:alice", R, pattern=PRE),
        b(T, "*", "User:alice", D),
    )
    assert a.authorize("User:alice", R, G, "g1")
    assert not a.authorize("User:alice", R, G, "g10")  # literal is exact
    assert a.authorize("User:alice", R, G, "team-a")
    assert not a.authorize("User:alice", R, G, "team")
    assert a.authorize("User:alice", D, T, "anything")
    assert not a.authorize("User:bob", R, G, "g1")


def test_wildcard_principal_and_hosts() -> None:
    a = auth(b(G, "g", "User:*", R, host="10.0.0.1"))
    assert a.authorize("User:anyone", R, G, "g", "10.0.0.1")
    assert not a.authorize("User:anyone", R, G, "g", "10.0.0.2")


def test_deny_wins_over_allow() -> None:
    a = auth(
        b(G, "*", "User:*", ALL),
        b(G, "secret-", "User:bob", R, DENY, PRE),
    )
    assert a.authorize("User:alice", R, G, "secret-x")
    assert not a.authorize("User:bob", R, G, "secret-x")
    assert a.authorize("User:bob", D, G, "secret-x")  # a DENY denies its operation only
    assert a.authorize("User:bob", R, G, "public")


def test_deny_all_denies_everything() -> None:
    a = auth(b(G, "g", "User:bob", ALL), b(G, "g", "User:bob", ALL, DENY))
    for op in (R, D, DEL):
        assert not a.authorize("User:bob", op, G, "g")


@pytest.mark.parametrize("granted", [R, DEL])
def test_allow_of_read_or_delete_implies_describe(granted: AclOperation) -> None:
    assert auth(b(G, "g", "User:a", granted)).authorize("User:a", D, G, "g")


def test_describe_implies_nothing_else() -> None:
    a = auth(b(G, "g", "User:a", D), b(T, "t", "User:a", AclOperation.CREATE))
    assert not a.authorize("User:a", R, G, "g")
    assert not a.authorize("User:a", D, T, "t")  # CREATE does not imply DESCRIBE


def test_deny_describe_does_not_deny_read() -> None:
    a = auth(b(G, "g", "User:a", R), b(G, "g", "User:a", D, DENY))
    assert a.authorize("User:a", R, G, "g")
    assert not a.authorize("User:a", D, G, "g")


def test_super_users_bypass_denies() -> None:
    a = auth(b(G, "*", "User:root", ALL, DENY), super_users=("User:root",))
    assert a.authorize("User:root", DEL, G, "g")


def test_authorized_operations_bitfield() -> None:
    a = auth(b(G, "g", "User:a", R), b(G, "g", "User:a", DEL))
    bits = a.authorized_operations("User:a", G, "g")
    assert bits == (1 << R) | (1 << DEL) | (1 << D)
    assert a.authorized_operations("User:b", G, "g") == 0


def test_invalid_bindings_are_refused() -> None:
    with pytest.raises(AclError):
        b(G, "g", "alice", R)  # no principal type
    with pytest.raises(AclError):
        b(G, "*", "User:a", R, pattern=PRE)
    with pytest.raises(AclError):
        b(G, "g", "User:a", AclOperation.CREATE)  # not a group operation
    with pytest.raises(AclError):
        b(C, "other", "User:a", D)


bindings = st.builds(
    lambda rt, name, principal, op, perm, pattern, host: b(
        rt, "pre" if pattern == PRE and name == "*" else name, principal, op, perm, pattern, host
    ),
    st.sampled_from([G, T]),
    st.sampled_from(["*", "g", "t", "pre"]),
    st.sampled_from(["User:a", "User:*"]),
    st.sampled_from([int(R), int(D), int(DEL), ALL]),
    st.sampled_from([ALLOW, DENY]),
    st.sampled_from([LIT, PRE]),
    st.sampled_from(["*", "1.2.3.4"]),
)


@given(st.lists(bindings, max_size=8))
def test_document_round_trip(items: list[AclBinding]) -> None:
    acls = Acls(3, tuple(items))
    back = Acls.decode(4, acls.encode())
    assert set(back.bindings) == set(items) and back.version == 4


def test_scram_credentials_and_plain() -> None:
    pw = "correct horse battery staple"  # (spaces: never inside base64 by chance)
    cred = make_credential("SCRAM-SHA-512", pw, 4096)
    assert verify_password("SCRAM-SHA-512", cred, pw)
    assert not verify_password("SCRAM-SHA-512", cred, pw.upper())
    creds = Credentials().with_credential("u", "SCRAM-SHA-512", cred)
    back = Credentials.decode(1, creds.encode())
    assert back.lookup("u", "SCRAM-SHA-512") == cred
    assert back.for_plain("u") == ("SCRAM-SHA-512", cred)
    assert pw.encode() not in creds.encode()  # only salted hashes are stored
    # a scramp client authenticates against the stored credential
    server = scramp.ScramMechanism("SCRAM-SHA-512").make_server(
        lambda user: back.users[user]["SCRAM-SHA-512"].auth_info()
    )
    client = scramp.ScramClient(["SCRAM-SHA-512"], "u", pw)
    server.set_client_first(client.get_client_first())
    client.set_server_first(server.get_server_first())
    server.set_client_final(client.get_client_final())
    client.set_server_final(server.get_server_final())


@pytest.mark.parametrize("iterations", [4095, 16385])
def test_iterations_out_of_kafkas_bounds_are_refused(iterations: int) -> None:
    with pytest.raises(CredentialError):
        make_credential("SCRAM-SHA-256", "pw", iterations)


def test_a_password_over_the_plain_bound_makes_no_credential() -> None:
    """PLAIN refuses passwords over 1 KiB before any work (their check costs CPU in
    proportion): no credential is made for one, so that every user can log in with PLAIN."""
    assert make_credential("SCRAM-SHA-512", "p" * 1024).iterations == 4096
    with pytest.raises(CredentialError, match="longer than 1024 bytes"):
        make_credential("SCRAM-SHA-512", "é" * 513)
