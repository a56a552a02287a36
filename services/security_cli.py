"""``groupcoord scram``: the SCRAM credentials that the gateway's SASL listeners check
(PLAIN included), kept salted and hashed in the store (docs/security.md, SASL).

The command writes the store directly (compare-and-set on the credentials document); every
gateway follows the document and sees a change within its poll interval. Passwords are read
from a prompt (not echoed, asked twice) or, with ``--password-stdin``, from the first line of
standard input; never from the command line.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import Any

import click

from services.options import opt
from shards.security.credentials import DEFAULT_ITERATIONS, MECHANISMS, CredentialError

MECHANISM = click.Choice(MECHANISMS, case_sensitive=False)


def _store_option(f: Any) -> Any:
    return opt(
        "--store",
        required=True,
        help="The store holding the credentials: the shards' store URL "
        "(sqlite:///path.db or redis://host:port/db).",
    )(f)


def _run(store: str, work: Any) -> Any:
    from shards.storage import open_store

    async def run() -> Any:
        async with open_store(store) as log_store:
            return await work(log_store)

    try:
        return asyncio.run(run())
    except CredentialError as ex:
        raise click.UsageError(str(ex)) from None
    except ValueError as ex:  # an invalid store URL
        raise click.UsageError(str(ex)) from None
    except Exception as ex:  # noqa: BLE001 - the store cannot be used: one line, exit 1
        click.echo(f"Error: cannot use the store: {ex}", err=True)
        sys.exit(1)


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        line = sys.stdin.readline()
        password = line[:-1] if line.endswith("\n") else line
        if password.endswith("\r"):
            password = password[:-1]
    else:
        password = click.prompt(
            "Password", hide_input=True, confirmation_prompt=True, show_default=False
        )
    if not password:
        raise click.UsageError("the password is empty")
    return str(password)


@click.group()
def scram() -> None:
    """SCRAM credentials of the gateway's SASL users (SCRAM-SHA-256/512, PLAIN)."""


@scram.command("set")
@_store_option
@click.argument("user")
@click.option(
    "--mechanism",
    "mechanisms",
    type=MECHANISM,
    multiple=True,
    help="SCRAM mechanism (repeatable; default: both).",
)
@click.option(
    "--iterations",
    type=click.IntRange(4096, 16384),
    default=DEFAULT_ITERATIONS,
    show_default=True,
    help="PBKDF2 iterations (Kafka's bounds: 4096-16384).",
)
@click.option(
    "--password-stdin", is_flag=True, help="Read the password from the first line of stdin."
)
def scram_set(
    store: str, user: str, mechanisms: tuple[str, ...], iterations: int, password_stdin: bool
) -> None:
    """Add or replace USER's credentials (PLAIN checks passwords against them too)."""
    from shards.security.admin import set_scram

    password = _read_password(password_stdin)
    names = tuple(m.upper() for m in mechanisms) or MECHANISMS

    async def work(log_store: Any) -> None:
        for mechanism in names:
            await set_scram(log_store, user, mechanism, password, iterations)

    _run(store, work)
    click.echo(f"credentials of {user!r} set: {', '.join(names)}")


@scram.command("delete")
@_store_option
@click.argument("user")
@click.option("--mechanism", type=MECHANISM, default=None, help="Only this mechanism.")
def scram_delete(store: str, user: str, mechanism: str | None) -> None:
    """Remove USER's credentials (exit 1 if there were none)."""
    from shards.security.admin import delete_scram

    mech = mechanism.upper() if mechanism else None
    found = _run(store, lambda s: delete_scram(s, user, mech))
    if not found:
        click.echo(f"Error: {user!r} has no {mech or 'SCRAM'} credentials", err=True)
        sys.exit(1)
    click.echo(f"credentials of {user!r} deleted: {mech or 'all'}")


@scram.command("list")
@_store_option
@click.option(
    "--format", "output", type=click.Choice(["table", "json"]), default="table", show_default=True
)
def scram_list(store: str, output: str) -> None:
    """The users with credentials, their mechanisms and iteration counts (no secrets)."""
    from shards.security.admin import read_credentials

    creds = _run(store, read_credentials)
    rows = [
        {"user": user, "mechanism": m, "iterations": c.iterations}
        for user, mechs in sorted(creds.users.items())
        for m, c in sorted(mechs.items())
    ]
    if output == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(f"{'USER':<32} {'MECHANISM':<16} ITERATIONS")
    for r in rows:
        click.echo(f"{r['user']:<32} {r['mechanism']:<16} {r['iterations']}")


def dev_listener_security_options(f: Any) -> Any:
    """``groupcoord dev``: its built-in gateway's listener security (the store is dev's own,
    the ACL APIs follow dev's --authorizer/--super-users); ``listener_security: dict``."""
    import functools

    command = f

    @functools.wraps(command)
    def bundled(*args: Any, **kw: Any) -> Any:
        from services.gateway.sasl import SaslSettings, parse_mechanisms

        try:
            mechanisms = parse_mechanisms(kw.pop("sasl_enabled_mechanisms"))
        except ValueError as ex:
            raise click.BadParameter(str(ex), param_hint="--sasl-enabled-mechanisms") from None
        listener = {
            "sasl": SaslSettings(
                mechanisms,
                kw.pop("failed_authentication_delay_ms"),
                kw.pop("sasl_max_receive_bytes"),
                kw.pop("connections_max_reauth_ms"),
            ),
        }
        return command(*args, listener_security=listener, **kw)

    for decorate in reversed(_listener_options()):
        bundled = decorate(bundled)
    return bundled


def _listener_options() -> list[Any]:
    from services.gateway.sasl import DEFAULT_MAX_RECEIVE_BYTES, DEFAULT_MECHANISMS

    return [
        opt(
            "--sasl-enabled-mechanisms",
            default=",".join(DEFAULT_MECHANISMS),
            help="SASL mechanisms served: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 "
            "(comma-separated). PLAIN sends passwords as they are: use it over TLS only.",
        ),
        opt(
            "--connections-max-reauth-ms",
            type=click.IntRange(min=0),
            default=0,
            help="Kafka's connections.max.reauth.ms: SASL sessions last this long and "
            "clients re-authenticate (KIP-368); 0: sessions do not expire.",
        ),
        opt(
            "--failed-authentication-delay-ms",
            type=click.IntRange(min=0),
            default=100,
            help="Kafka's connection.failed.authentication.delay.ms: a failed "
            "authentication is answered after this delay, then the connection closes.",
        ),
        opt(
            "--sasl-max-receive-bytes",
            type=click.IntRange(min=64),
            default=DEFAULT_MAX_RECEIVE_BYTES,
            help="Kafka's sasl.server.max.receive.size: the largest request accepted "
            "before authentication.",
        ),
    ]


def gateway_security_options(f: Any) -> Any:
    """The Kafka listener's security (``groupcoord gateway``); the command receives them as
    one ``security: dict`` of GatewaySettings fields."""
    import functools

    command = f

    @functools.wraps(command)
    def bundled(
        *args: Any,
        sasl_enabled_mechanisms: str,
        security_store: str | None,
        connections_max_reauth_ms: int,
        failed_authentication_delay_ms: int,
        sasl_max_receive_bytes: int,
        gateway_authorizer: bool,
        gateway_super_users: str,
        **kw: Any,
    ) -> Any:
        from services.gateway.sasl import SaslSettings, parse_mechanisms

        if gateway_authorizer and not security_store:
            raise click.UsageError("--authorizer needs --store")
        supers = parse_principals(gateway_super_users, "--super-users")
        try:
            mechanisms = parse_mechanisms(sasl_enabled_mechanisms)
        except ValueError as ex:
            raise click.BadParameter(str(ex), param_hint="--sasl-enabled-mechanisms") from None
        security = {
            "store_url": security_store,
            "authorizer": gateway_authorizer,
            "super_users": supers,
            "sasl": SaslSettings(
                mechanisms,
                failed_authentication_delay_ms,
                sasl_max_receive_bytes,
                connections_max_reauth_ms,
            ),
        }
        return command(*args, security=security, **kw)

    for decorate in reversed(
        [
            *_listener_options(),
            opt(
                "--store",
                "security_store",
                default=None,
                help="The store holding the SCRAM credentials and the ACLs (the shards' "
                "store URL); needed by SASL listeners and --authorizer.",
            ),
            opt(
                "--authorizer/--no-authorizer",
                "gateway_authorizer",
                default=False,
                help="Serve CreateAcls/DescribeAcls/DeleteAcls over the store's ACLs (which "
                "the shards' --authorizer enforces). Off: SECURITY_DISABLED, as Kafka.",
            ),
            opt(
                "--super-users",
                "gateway_super_users",
                default="",
                help="Principals allowed everything (the shards' --super-users).",
            ),
        ]
    ):
        bundled = decorate(bundled)
    return bundled


# ---- groupcoord acls ---------------------------------------------------------------------


@click.group()
def acls() -> None:
    """ACLs on groups and topics, as kafka-acls manages them (docs/security.md, ACLs).
    Enforced by shards started with --authorizer."""


def _acl_options(f: Any) -> Any:
    for decorate in reversed(
        [
            _store_option,
            click.option("--allow-principal", multiple=True, help="User:<name> or User:*."),
            click.option("--deny-principal", multiple=True, help="User:<name> or User:*."),
            click.option(
                "--allow-host", multiple=True, help="Host of the allowed principals (default *)."
            ),
            click.option(
                "--deny-host", multiple=True, help="Host of the denied principals (default *)."
            ),
            click.option(
                "--operation",
                "operations",
                multiple=True,
                help="Read, Describe, Delete, DescribeConfigs, AlterConfigs (groups), Read, "
                "Describe, Create, Delete (topics), Describe, Create (cluster), or All.",
            ),
            click.option("--group", "groups", multiple=True, help="A group (or '*')."),
            click.option("--topic", "topics", multiple=True, help="A topic (or '*')."),
            click.option("--cluster", is_flag=True, help="The cluster resource."),
            click.option(
                "--resource-pattern-type",
                type=click.Choice(["literal", "prefixed"], case_sensitive=False),
                default="literal",
                show_default=True,
            ),
        ]
    ):
        f = decorate(f)
    return f


def _op_key(name: str) -> str:
    """Kafka's CamelCase operation names (DescribeConfigs) or upper case (DESCRIBE_CONFIGS)."""
    import re

    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name.strip()).upper().replace("-", "_")


def _bindings(kw: dict[str, Any], *, for_add: bool) -> list[Any]:
    from shards.security.acl import (
        CLUSTER_NAME,
        AclBinding,
        AclError,
        PatternType,
        Permission,
        ResourceType,
        parse_operation,
    )

    resources = [(ResourceType.GROUP, g) for g in kw["groups"]]
    resources += [(ResourceType.TOPIC, t) for t in kw["topics"]]
    if kw["cluster"]:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    if not resources:
        raise click.UsageError("name a resource: --group, --topic or --cluster")
    if not kw["operations"]:
        raise click.UsageError("name at least one --operation")
    principals = [(Permission.ALLOW, p, kw["allow_host"] or ("*",)) for p in kw["allow_principal"]]
    principals += [(Permission.DENY, p, kw["deny_host"] or ("*",)) for p in kw["deny_principal"]]
    if not principals:
        raise click.UsageError("name --allow-principal or --deny-principal")
    pattern = PatternType[kw["resource_pattern_type"].upper()]
    out = []
    try:
        ops = [parse_operation(_op_key(o)) for o in kw["operations"]]
        for rt, name in resources:
            for permission, principal, hosts in principals:
                for host in hosts:
                    for op in ops:
                        out.append(AclBinding(rt, pattern, name, principal, host, op, permission))
    except AclError as ex:
        raise click.UsageError(str(ex)) from None
    return out


@acls.command("add")
@_acl_options
def acls_add(**kw: Any) -> None:
    """Add ACLs (every combination of the resources, principals, hosts and operations)."""
    from shards.security.admin import add_acls

    bindings = _bindings(kw, for_add=True)
    _run(kw["store"], lambda s: add_acls(s, bindings))
    for b in bindings:
        click.echo(f"added: {_describe(b)}")


@acls.command("remove")
@_acl_options
def acls_remove(**kw: Any) -> None:
    """Remove ACLs (exit 1 if none of them existed)."""
    from shards.security.admin import remove_acls

    bindings = _bindings(kw, for_add=False)
    removed = _run(kw["store"], lambda s: remove_acls(s, bindings))
    if not removed:
        click.echo("Error: none of these ACLs exists", err=True)
        sys.exit(1)
    click.echo(f"removed {removed} ACL(s)")


@acls.command("list")
@_store_option
@click.option("--principal", default=None, help="Only the ACLs of this principal.")
@click.option("--group", default=None, help="Only the ACLs that match this group.")
@click.option("--topic", default=None, help="Only the ACLs that match this topic.")
@click.option(
    "--format", "output", type=click.Choice(["table", "json"]), default="table", show_default=True
)
def acls_list(
    store: str, principal: str | None, group: str | None, topic: str | None, output: str
) -> None:
    """The ACLs, optionally those of one principal or matching one group or topic."""
    from shards.security.acl import ResourceType
    from shards.security.admin import read_acls

    current = _run(store, read_acls)
    rows = list(current.bindings)
    if principal:
        rows = [b for b in rows if b.principal == principal]
    if group:
        rows = [b for b in rows if b.matches_resource(ResourceType.GROUP, group)]
    if topic:
        rows = [b for b in rows if b.matches_resource(ResourceType.TOPIC, topic)]
    if output == "json":
        click.echo(json.dumps([b.to_json() for b in sorted(rows)], indent=2))
        return
    for b in sorted(rows):
        click.echo(_describe(b))


def _describe(b: Any) -> str:
    j = b.to_json()
    return (
        f"{j['permission']} {j['principal']} from {j['host']}: {j['operation']} on "
        f"{j['resource_type']} {j['pattern_type']} {j['name']!r}"
    )


#: a list of principals: separated by ";" (Kafka's super.users) or by "," before the next
#: "User:" -- a certificate subject's own commas ("User:CN=gw,O=acme") stay in its principal
_PRINCIPAL_SEPARATOR = re.compile(r";|,(?=\s*User:)")


def parse_principals(text: str, what: str) -> tuple[str, ...]:
    """``User:a;User:b`` or ``User:a,User:b``; a certificate subject may hold commas."""
    names = tuple(p.strip() for p in _PRINCIPAL_SEPARATOR.split(text) if p.strip())
    for p in names:
        if not p.startswith("User:") or len(p) == len("User:"):
            raise click.BadParameter(f"{p!r} is not User:<name>", param_hint=what)
    return names


def authorizer_options(f: Any) -> Any:
    """The shard's authorizer (dev, shard): the command receives ``authorization: dict`` of
    ShardSettings fields."""
    import functools

    command = f

    @functools.wraps(command)
    def bundled(
        *args: Any,
        authorizer: bool,
        super_users: str,
        trusted_gateway_principals: str,
        **kw: Any,
    ) -> Any:
        authorization = {
            "authorizer": authorizer,
            "super_users": parse_principals(super_users, "--super-users"),
            "trusted_gateway_principals": parse_principals(
                trusted_gateway_principals, "--trusted-gateway-principals"
            ),
        }
        return command(*args, authorization=authorization, **kw)

    for decorate in reversed(
        [
            opt(
                "--authorizer/--no-authorizer",
                default=False,
                help="Enforce the ACLs in the store (groupcoord acls) on every group and "
                "topic RPC, as Kafka's StandardAuthorizer. Off: everything is allowed.",
            ),
            opt(
                "--super-users",
                default="",
                help="Principals allowed everything: User:<name>, separated by ';' (as Kafka's "
                "super.users) or ','; a certificate subject's commas stay in it.",
            ),
            opt(
                "--trusted-gateway-principals",
                default="",
                help="gRPC callers (User:<certificate subject>) whose calls may name the "
                "Kafka client they serve. User:ANONYMOUS trusts every plaintext caller: only "
                "where nothing but gateways reach the gRPC port (docs/security.md). Separated "
                "by ';' or ',' (User:CN=gateway,O=acme is one principal).",
            ),
        ]
    ):
        bundled = decorate(bundled)
    return bundled
