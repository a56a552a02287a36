"""Options shared by the ``groupcoord`` commands: each is also an environment variable
(``GROUPCOORD_<NAME>``, shown in ``--help``)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import click

ENV = "GROUPCOORD_"
#: Kafka's security.protocol values (the listener's and the upstream connection's)
SECURITY_PROTOCOL = click.Choice(
    ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"], case_sensitive=False
)


def opt(*names: str, env: str | None = None, **kw: Any) -> Callable[[Any], Any]:
    """A click option also read from ``GROUPCOORD_<env>``: by default the option's own name
    (``--lease-ms``: ``GROUPCOORD_LEASE_MS``; ``--authorizer/--no-authorizer``:
    ``GROUPCOORD_AUTHORIZER``)."""
    if env is None:
        env = names[0].removeprefix("--").split("/")[0].upper().replace("-", "_")
    return click.option(*names, envvar=ENV + env, show_envvar=True, show_default=True, **kw)


def upstream_client_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """How to reach the upstream cluster (dev, gateway, shard). The command receives them
    (and --broker-port-base where it has it) as one ``upstream: UpstreamArgs``."""

    command = f  # (f is rebound below, as each option is added)

    @functools.wraps(command)
    def bundled(
        *args: Any,
        upstream_bootstrap: str | None,
        upstream_security_protocol: str,
        upstream_ssl_cafile: str | None,
        upstream_ssl_certfile: str | None,
        upstream_ssl_keyfile: str | None,
        upstream_sasl_mechanism: str | None,
        upstream_sasl_username: str | None,
        upstream_sasl_password: str | None,
        broker_port_base: int | None = None,
        exactly_once: bool = False,
        **kw: Any,
    ) -> Any:
        upstream = UpstreamArgs(
            upstream_bootstrap,
            broker_port_base,
            upstream_security_protocol,
            upstream_ssl_cafile,
            upstream_ssl_certfile,
            upstream_ssl_keyfile,
            upstream_sasl_mechanism,
            upstream_sasl_username,
            upstream_sasl_password,
            exactly_once,
        )
        return command(*args, upstream=upstream, **kw)

    f = opt(
        "--upstream-bootstrap",
        default=None,
        help="Proxy mode: the Kafka cluster to front, host:port[,host:port...]. Group and "
        "offset APIs are answered by groupcoord, everything else is forwarded to the "
        "upstream brokers; the topic catalog mirrors the cluster's topics and "
        "DescribeGroupLag reads its log-end offsets (docs/proxy-mode.md). Every process of "
        "a deployment sets it. Unset: coordinator-only mode.",
    )(bundled)
    f = opt(
        "--upstream-security-protocol",
        type=SECURITY_PROTOCOL,
        default="PLAINTEXT",
        help="How to connect to the upstream brokers (SASL_*: with the gateway's own "
        "credentials, --upstream-sasl-*).",
    )(f)
    f = opt(
        "--upstream-ssl-cafile",
        default=None,
        help="CA bundle (PEM) that signed the upstream brokers' certificates "
        "(default: the system's).",
    )(f)
    f = opt(
        "--upstream-ssl-certfile",
        default=None,
        help="Client certificate (PEM) for mutual TLS with the upstream.",
    )(f)
    f = opt(
        "--upstream-ssl-keyfile",
        default=None,
        help="Private key (PEM) of --upstream-ssl-certfile.",
    )(f)
    f = opt(
        "--upstream-sasl-mechanism",
        type=click.Choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"], case_sensitive=False),
        default=None,
        help="SASL mechanism towards the upstream (SASL_PLAINTEXT / SASL_SSL).",
    )(f)
    f = opt(
        "--upstream-sasl-username",
        default=None,
        help="The upstream user groupcoord authenticates as.",
    )(f)
    f = opt(
        "--upstream-sasl-password",
        default=None,
        help="Its password (prefer the environment variable: arguments are visible to ps).",
    )(f)
    return f


@dataclasses.dataclass(frozen=True)
class UpstreamArgs:
    bootstrap: str | None = None
    broker_port_base: int | None = None
    security_protocol: str = "PLAINTEXT"
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = dataclasses.field(default=None, repr=False)
    #: the gateway answers TxnOffsetCommit (docs/exactly-once.md; dev, gateway)
    exactly_once: bool = False

    def settings(self) -> dict[str, Any]:
        """GatewaySettings fields; the TLS files are checked now (a clear error at start)."""
        from services.upstream.cluster import parse_bootstrap
        from services.upstream.security import UpstreamSecurity

        if not self.bootstrap:
            return {}
        try:
            parse_bootstrap(self.bootstrap)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--upstream-bootstrap") from None
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise click.BadParameter(
                "give both --upstream-ssl-certfile and --upstream-ssl-keyfile, or neither"
            )
        from services.upstream.security import SaslCredentials

        protocol = self.security_protocol.upper()
        sasl = None
        if protocol.startswith("SASL_"):
            if not (self.sasl_mechanism and self.sasl_username and self.sasl_password):
                raise click.BadParameter(
                    f"{protocol} needs --upstream-sasl-mechanism, --upstream-sasl-username "
                    "and --upstream-sasl-password",
                    param_hint="--upstream-security-protocol",
                )
            sasl = SaslCredentials(
                self.sasl_mechanism.upper(), self.sasl_username, self.sasl_password
            )
        security = UpstreamSecurity(
            protocol, self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile, sasl
        )
        security.ssl_context()  # unreadable files fail here, before anything starts
        return {
            "upstream_bootstrap": self.bootstrap,
            "upstream_security": security,
            "broker_port_base": self.broker_port_base,
            "exactly_once": self.exactly_once,
        }

    def cluster(self) -> Any:
        """The upstream client the shard uses (topic catalog mirror, lag), or None."""
        from services.upstream.cluster import UpstreamCluster

        settings = self.settings()
        if not settings:
            return None
        security = settings["upstream_security"]
        return UpstreamCluster(
            self.bootstrap or "", security.ssl_context(), sasl=security.sasl_credentials()
        )


# ---- TLS on gRPC (docs/security.md) ---------------------------------------------------------
def tls_options(server: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--tls-certfile/--tls-keyfile/--tls-cafile/--tls-server-name (and, on servers,
    --tls-client-auth), given to the command as one ``tls: TlsArgs``. On a server the
    certificate is its server certificate and also the client certificate of its own
    outgoing calls; on a client (CLI, load test, gateway -> shards) the client certificate."""

    def wrap(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def bundled(
            *args: Any,
            tls_certfile: str | None,
            tls_keyfile: str | None,
            tls_cafile: str | None,
            tls_server_name: str | None,
            tls_client_auth: str = "none",
            **kw: Any,
        ) -> Any:
            tls = TlsArgs(tls_certfile, tls_keyfile, tls_cafile, tls_server_name, tls_client_auth)
            return command(*args, tls=tls, **kw)

        if server:
            cert_help = (
                "gRPC TLS: PEM server certificate, reloaded when it changes; set, the gRPC "
                "port serves TLS only. Also the client certificate of this process's calls "
                "to other groupcoord processes (read at start)."
            )
        else:
            cert_help = (
                "gRPC TLS: PEM client certificate (mutual TLS), read when a connection is opened."
            )
        options = [
            opt("--tls-certfile", default=None, help=cert_help),
            opt(
                "--tls-keyfile",
                default=None,
                help="gRPC TLS: the PEM private key of --tls-certfile.",
            ),
            opt(
                "--tls-cafile",
                default=None,
                help="gRPC TLS: PEM CA bundle that signed the other processes' certificates "
                "(servers: also the clients' with --tls-client-auth required); default: the "
                "system's." + ("" if server else " Set (or --tls-certfile): calls use TLS."),
            ),
            opt(
                "--tls-server-name",
                default=None,
                help="gRPC TLS: the name the servers' certificates are checked against "
                "(default: the host dialled).",
            ),
        ]
        if server:
            options.append(
                opt(
                    "--tls-client-auth",
                    type=click.Choice(["none", "required"]),
                    default="none",
                    help="gRPC TLS: required = mutual TLS, callers need a certificate "
                    "signed by --tls-cafile.",
                )
            )
        f: Callable[..., Any] = bundled
        for option in reversed(options):  # click lists the last decorator applied first
            f = option(f)
        return f

    return wrap


def _tls_failure(e: Exception) -> click.ClickException:
    return click.ClickException(str(e))


@dataclasses.dataclass(frozen=True)
class TlsArgs:
    certfile: str | None = None
    keyfile: str | None = None
    cafile: str | None = None
    server_name: str | None = None
    client_auth: str = "none"

    def _pair(self) -> None:
        if (self.certfile is None) != (self.keyfile is None):
            raise click.BadParameter(
                "give both --tls-certfile and --tls-keyfile, or neither", param_hint="--tls-*"
            )

    def server(self) -> Any:
        """The gRPC server's ``ServerTls`` (None: plaintext); the files are loaded now, so
        that a missing file or a key not matching its certificate fails at start."""
        from services.process.tls import ServerTls, TlsError

        self._pair()
        if self.certfile is None or self.keyfile is None:
            if self.client_auth != "none":
                raise click.BadParameter(
                    "--tls-client-auth needs --tls-certfile and --tls-keyfile",
                    param_hint="--tls-client-auth",
                )
            return None
        try:
            tls = ServerTls(self.certfile, self.keyfile, self.cafile, self.client_auth)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--tls-client-auth") from None
        try:
            tls.check()
        except TlsError as e:
            raise _tls_failure(e) from None
        return tls

    def client(self) -> Any:
        """The gRPC clients' ``ClientTls`` (None: plaintext): TLS when a CA bundle or a
        certificate is given."""
        from services.process.tls import ClientTls, TlsError

        self._pair()
        if self.cafile is None and self.certfile is None:
            return None
        tls = ClientTls(self.cafile, self.certfile, self.keyfile, self.server_name)
        try:
            tls.check()
        except TlsError as e:
            raise _tls_failure(e) from None
        return tls


# ---- the gateway's Kafka listener (docs/security.md) ----------------------------------------
def listener_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--security-protocol and --ssl-* of the gateway's Kafka listeners (gateway, dev), given
    to the command as one ``listener: ListenerArgs``."""
    command = f

    @functools.wraps(command)
    def bundled(
        *args: Any,
        security_protocol: str,
        ssl_certfile: str | None,
        ssl_keyfile: str | None,
        ssl_cafile: str | None,
        ssl_client_auth: str,
        **kw: Any,
    ) -> Any:
        listener = ListenerArgs(
            security_protocol.upper(), ssl_certfile, ssl_keyfile, ssl_cafile, ssl_client_auth
        )
        return command(*args, listener=listener, **kw)

    # (click lists the last option applied first)
    f = opt(
        "--ssl-client-auth",
        type=click.Choice(["none", "requested", "required"]),
        default="none",
        help="Kafka listener TLS: client certificates (Kafka's ssl.client.auth); a verified "
        "certificate's subject is the client's principal, User:<DN>.",
    )(bundled)
    f = opt(
        "--ssl-cafile",
        default=None,
        help="Kafka listener TLS: PEM CA bundle that signed the clients' certificates.",
    )(f)
    f = opt(
        "--ssl-keyfile",
        default=None,
        help="Kafka listener TLS: the PEM private key of --ssl-certfile.",
    )(f)
    f = opt(
        "--ssl-certfile",
        default=None,
        help="Kafka listener TLS: PEM server certificate (chain); reloaded when it changes.",
    )(f)
    f = opt(
        "--security-protocol",
        type=SECURITY_PROTOCOL,
        default="PLAINTEXT",
        help="The Kafka listener's security protocol (Kafka's security.protocol). SSL and "
        "SASL_SSL need --ssl-certfile and --ssl-keyfile.",
    )(f)
    return f


@dataclasses.dataclass(frozen=True)
class ListenerArgs:
    security_protocol: str = "PLAINTEXT"
    certfile: str | None = None
    keyfile: str | None = None
    cafile: str | None = None
    client_auth: str = "none"

    def settings(self) -> dict[str, Any]:
        """GatewaySettings fields; the files are loaded now (a clear error at start)."""
        from services.process.tls import SslListener, TlsError

        protocol = self.security_protocol
        if protocol in ("PLAINTEXT", "SASL_PLAINTEXT"):
            if self.certfile or self.keyfile:
                raise click.BadParameter(
                    "--ssl-certfile/--ssl-keyfile need --security-protocol SSL or SASL_SSL",
                    param_hint="--security-protocol",
                )
            return {"security_protocol": protocol}
        if self.certfile is None or self.keyfile is None:
            raise click.BadParameter(
                f"--security-protocol {protocol} needs --ssl-certfile and --ssl-keyfile",
                param_hint="--security-protocol",
            )
        if self.client_auth != "none" and self.cafile is None:
            raise click.BadParameter(
                f"--ssl-client-auth {self.client_auth} needs --ssl-cafile (the clients' CA)",
                param_hint="--ssl-client-auth",
            )
        try:
            tls = SslListener(self.certfile, self.keyfile, self.cafile, self.client_auth)
        except TlsError as e:
            raise _tls_failure(e) from None
        return {"security_protocol": protocol, "listener_tls": tls}
