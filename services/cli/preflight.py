"""Checks of what a process is about to use, made before anything starts: its ports are free
(and its ``--host`` is an address of this machine), its data directory can be written.

Without them a port in use surfaced mid-start -- ``dev``'s Kafka port after the shard had
loaded every partition, as an ``[Errno 98]`` naming no option; the gRPC port with a raw line of
gRPC's C core before ours -- and an unusable data directory as a bare ``[Errno 2]``. Each
failure here is one line naming the option (``groupcoord: error: --kafka-port 9092: ...``,
exit 1). A port taken between this check and the real bind still fails, as before.
"""

from __future__ import annotations

import errno
import os
import socket
import tempfile
from collections.abc import Sequence

import click

#: what the processes' own listeners do (asyncio.start_server, gRPC with so_reuseport off)
_V6ONLY = getattr(socket, "IPV6_V6ONLY", None)


def check_ports(host: str, ports: Sequence[tuple[str, int | None]]) -> None:
    """``host``: the --host every listener binds; ``ports``: (option, port) pairs, None for
    an option not given, 0 for "any free port" (not checked). Raises
    :class:`click.ClickException` naming --host when it is not this machine's, else the
    option of the first port that is given twice, in use, or not allowed."""
    problem = _bind_problem(host, 0)  # the host alone, whatever the ports
    if problem is not None:
        raise click.ClickException(f"--host {host}: {problem}")
    seen: dict[int, str] = {}
    for option, port in ports:
        if not port:
            continue
        if port in seen:
            raise click.ClickException(
                f"{option} {port}: the same port as {seen[port]}; give each its own"
            )
        seen[port] = option
    for option, port in ports:
        if port:
            problem = _bind_problem(host, port)
            if problem is not None:
                raise click.ClickException(f"{option} {port}: {problem}")


def _bind_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on (None: it can, or the reason is not one we
    know how to say: the real listener then reports it)."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as ex:
        return f"does not resolve to an address to listen on ({ex.strerror})"
    for family, kind, proto, _, address in dict.fromkeys(infos):
        try:
            probe = socket.socket(family, kind, proto)
        except OSError:  # an address family this machine lacks: the listener skips it too
            continue
        with probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and _V6ONLY is not None:
                probe.setsockopt(socket.IPPROTO_IPV6, _V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as ex:
                where = f"{host}:{port}"
                if ex.errno == errno.EADDRINUSE:
                    return (
                        f"{where} is already in use (another process listens there: stop it, "
                        "or choose another port; 0 picks a free one)"
                    )
                if ex.errno == errno.EACCES:
                    why = " (ports below 1024 need privileges)" if port < 1024 else ""
                    return f"not allowed to listen on {where}{why}"
                if ex.errno == errno.EADDRNOTAVAIL:
                    return "not an address of this machine"
                return None
    return None


def check_writable_dir(option: str, path: str, value: str | None = None) -> None:
    """``path`` exists or can be made, and files can be written in it; else
    :class:`click.ClickException` naming ``option`` and its ``value`` (default: ``path``; a
    store URL is followed by the directory of its file)."""
    said = f"{option} {value or path}" + ("" if value is None else f": directory {path}")
    if os.path.exists(path) and not os.path.isdir(path):
        raise click.ClickException(f"{said}: not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as ex:
        raise click.ClickException(f"{said}: cannot create it ({ex.strerror or ex})") from None
    try:
        fd, probe = tempfile.mkstemp(dir=path, prefix=".groupcoord-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as ex:
        raise click.ClickException(f"{said}: cannot write in it ({ex.strerror or ex})") from None
