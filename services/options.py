"""Options shared by the ``groupcoord`` commands: each is also an environment variable
(``GROUPCOORD_<NAME>``, shown in ``--help``)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import click

ENV = "GROUPCOORD_"


def opt(*names: str, env: str, **kw: Any) -> Callable[[Any], Any]:
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
        )
        return command(*args, upstream=upstream, **kw)

    f = opt(
        "--upstream-bootstrap",
        env="UPSTREAM_BOOTSTRAP",
        default=None,
        help="Proxy mode: the Kafka cluster to front, host:port[,host:port...]. Group and "
        "offset APIs are answered by groupcoord, everything else is forwarded to the "
        "upstream brokers; the topic catalog mirrors the cluster's topics and "
        "DescribeGroupLag reads its log-end offsets (docs/proxy-mode.md). Every process of "
        "a deployment sets it. Unset: coordinator-only mode.",
    )(bundled)
    f = opt(
        "--upstream-security-protocol",
        env="UPSTREAM_SECURITY_PROTOCOL",
        type=click.Choice(["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"], case_sensitive=False),
        default="PLAINTEXT",
        help="How to connect to the upstream brokers (SASL_*: with the gateway's own "
        "credentials, --upstream-sasl-*).",
    )(f)
    f = opt(
        "--upstream-ssl-cafile",
        env="UPSTREAM_SSL_CAFILE",
        default=None,
        help="CA bundle (PEM) that signed the upstream brokers' certificates "
        "(default: the system's).",
    )(f)
    f = opt(
        "--upstream-ssl-certfile",
        env="UPSTREAM_SSL_CERTFILE",
        default=None,
        help="Client certificate (PEM) for mutual TLS with the upstream.",
    )(f)
    f = opt(
        "--upstream-ssl-keyfile",
        env="UPSTREAM_SSL_KEYFILE",
        default=None,
        help="Private key (PEM) of --upstream-ssl-certfile.",
    )(f)
    f = opt(
        "--upstream-sasl-mechanism",
        env="UPSTREAM_SASL_MECHANISM",
        type=click.Choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"], case_sensitive=False),
        default=None,
        help="SASL mechanism towards the upstream (SASL_PLAINTEXT / SASL_SSL).",
    )(f)
    f = opt(
        "--upstream-sasl-username",
        env="UPSTREAM_SASL_USERNAME",
        default=None,
        help="The upstream user groupcoord authenticates as.",
    )(f)
    f = opt(
        "--upstream-sasl-password",
        env="UPSTREAM_SASL_PASSWORD",
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
