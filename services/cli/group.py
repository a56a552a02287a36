"""The command group: the one place where a failure becomes one line on stderr, and where
commands of other packages join through the ``groupcoord.commands`` entry-point group."""

from __future__ import annotations

import logging
import re
import sys
import traceback
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import click

#: Commands other packages add, by entry point: its name is the command's, its object a
#: click command (groupcoord's own ``loadtest`` is registered so, in pyproject.toml)::
#:
#:     [project.entry-points."groupcoord.commands"]
#:     loadtest = "loadtest.cli:loadtest"
ENTRY_POINT_GROUP = "groupcoord.commands"


class Cli(click.Group):
    """The command group; also the one place where a failure becomes one line on stderr
    (``groupcoord: error: ...``) and a non-zero exit: bad options (exit 2), start-up
    failures a user can fix (a port in use, an unreachable store, a read-only data
    directory: exit 1), anything else (exit 1). The traceback only with --log-level DEBUG.
    Besides its own commands it offers those installed under ``ENTRY_POINT_GROUP``."""

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            result = super().main(args, prog_name, complete_var, False, **extra)
        except click.Abort:
            _fail("interrupted", 130)
        except Exception as exc:
            message, code = _describe(exc)
            if logging.getLogger("groupcoord").isEnabledFor(logging.DEBUG):
                traceback.print_exception(exc)
            _fail(message, code)
        sys.exit(result if isinstance(result, int) else 0)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_installed()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The built-in command, else the one installed under that name, loaded only when
        asked for (``groupcoord dev`` does not import the load tester)."""
        command = super().get_command(ctx, cmd_name)
        if command is None and (entry := _installed().get(cmd_name)) is not None:
            command = entry.load()
            self.add_command(command, cmd_name)
        return command


def _installed() -> dict[str, EntryPoint]:
    return {entry.name: entry for entry in entry_points(group=ENTRY_POINT_GROUP)}


def _describe(exc: BaseException) -> tuple[str, int]:
    """The one-line message and exit code of a failure."""
    import sqlite3

    from shards.storage.base import StoreError, StoreRefusedError

    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, click.UsageError):
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        return exc.format_message() + hint, exc.exit_code
    if isinstance(exc, click.ClickException):
        return exc.format_message(), exc.exit_code
    if isinstance(exc, StoreError):
        sqlite = str(exc).startswith("sqlite")
        if isinstance(exc, StoreRefusedError):
            # the server answered and the store refused it (cluster or not, too few
            # replicas...): the message says what to change
            return f"cannot use the store: {exc}", 1
        hint = "is the data directory writable?" if sqlite else "is a Redis server listening there?"
        return f"cannot use the store: {exc} ({hint})", 1
    if isinstance(exc, sqlite3.Error):
        return f"cannot use the SQLite store: {exc} (is the data directory writable?)", 1
    if isinstance(exc, OSError):
        return str(exc), 1
    bind = re.match(r"Failed to bind to address (\S+?);?(\s|$)", str(exc))
    if isinstance(exc, RuntimeError) and bind:  # grpc's way of saying so
        return f"cannot listen on {bind.group(1)}: the port is in use or not allowed", 1
    return f"unexpected {type(exc).__name__}: {exc} (--log-level DEBUG shows where)", 1


def _fail(message: str, code: int) -> None:
    click.echo(f"groupcoord: error: {' '.join(message.split())}", err=True)
    sys.exit(code)
