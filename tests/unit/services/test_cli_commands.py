"""The command group: commands of other packages join through the ``groupcoord.commands``
entry points (``groupcoord loadtest`` so, without ``services`` importing ``loadtest``), and
``dev`` hands its hidden A/B switches to the built-in gateway."""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from services.cli import group, main


@click.command()
def hello() -> None:
    """Say hello."""
    click.echo("hello from a plugin")


def test_loadtest_is_registered_as_an_entry_point() -> None:
    registered = {e.name: e.value for e in entry_points(group=group.ENTRY_POINT_GROUP)}
    assert registered["loadtest"] == "loadtest.cli:loadtest"
    result = CliRunner().invoke(main, ["loadtest", "--help"])
    assert result.exit_code == 0, result.output
    assert "Load test a deployment" in result.output


def test_an_installed_command_joins_the_group(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = EntryPoint("hello", f"{__name__}:hello", group.ENTRY_POINT_GROUP)
    monkeypatch.setattr(group, "entry_points", lambda group: [plugin])

    @click.group(cls=group.Cli)
    def root() -> None:
        """A group."""

    root.add_command(click.Command("own", help="A built-in command."))
    listing = CliRunner().invoke(root, ["--help"])
    assert "hello  Say hello." in listing.output and "own" in listing.output
    result = CliRunner().invoke(root, ["hello"], standalone_mode=False)
    assert result.exit_code == 0 and result.output == "hello from a plugin\n"
    assert root.get_command(click.Context(root), "missing") is None


def test_dev_hands_its_hidden_switches_to_the_built_in_gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.cli import dev
    from services.process import logs

    served: list[Any] = []

    async def serve(app: Any, companion: Any = None) -> None:
        served.append(companion)

    monkeypatch.setattr(logs, "configure", lambda *args: None)
    monkeypatch.delenv("GROUPCOORD_SHARD_CALLS", raising=False)
    monkeypatch.setattr(dev, "serve", serve)
    args = ["dev", "--data-dir", str(tmp_path), "--grpc-port", "0", "--kafka-port", "0"]
    for extra, expected in [
        ([], ("batched", False, True)),
        (["--gateway-loopback", "--shard-calls", "unary"], ("unary", True, True)),
        (["--no-gateway-steady"], ("batched", False, False)),
    ]:
        result = CliRunner().invoke(main, [*args, *extra], standalone_mode=False)
        assert result.exit_code == 0, result.output
        gateway = served.pop()
        assert isinstance(gateway, dev.BuiltinGateway)
        assert (gateway.shard_calls, gateway.loopback, gateway.steady) == expected
