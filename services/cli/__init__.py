"""The ``groupcoord`` command: one subcommand per deployable process, and the operator tools.

Every option can also be set with an environment variable (shown in ``--help``), so the
same image runs under docker-compose and Helm with nothing but environment.

One module per command family: ``dev``, ``shard``, ``gateway`` and ``assignor`` run a
process (their options in ``options``, how they run until signalled in ``serving``),
``partitions`` and ``repair`` operate on a store (``store``: its URL and the SQLite lock);
``group`` is the command group and its one-line errors. The operator tools live with what
they operate (services/admin, services/history, services/security_cli.py,
services/health_probe.py); commands of other packages join through the
``groupcoord.commands`` entry-point group (``groupcoord loadtest``: pyproject.toml).
"""

from __future__ import annotations

import click

from services import health_probe
from services.admin.commands import configs, groups, topics
from services.cli import assignor, dev, gateway, partitions, repair, shard
from services.cli.group import Cli
from services.history.commands import history
from services.security_cli import acls, scram

__all__ = ["main"]


@click.group(cls=Cli)
@click.version_option(package_name="groupcoord")
def main() -> None:
    """groupcoord: a standalone, horizontally scalable Kafka group coordinator."""


for _command in (
    dev.dev,
    shard.shard,
    partitions.partitions,
    gateway.gateway,
    assignor.assignor,
    repair.repair,
    health_probe.health,
    history,
    groups,
    topics,
    configs,
    scram,
    acls,
):
    main.add_command(_command)
