"""The optional features and what they need: one message, the same for every feature, true in
a checkout and in an installed package.

    history export needs pyarrow: run scripts/setup analytics (in a checkout) or
    pip install 'groupcoord[analytics]'

``scripts/setup EXTRA`` installs the extra into the checkout's ``.venv``; ``pip install
'groupcoord[EXTRA]'`` into the environment groupcoord is installed in. The extras are
pyproject.toml's ``[project.optional-dependencies]``. Two places say it without this module,
in the same words: ``pipelines/`` (shipped alone to Spark) and ``proto/build_protos.py`` (run
before the package exists); tests/unit/services/test_extras.py keeps all of them alike.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

import click


def needs_message(feature: str, extra: str, distributions: list[str]) -> str:
    """The one line that says ``feature`` needs ``distributions`` (pip names), from ``extra``."""
    return (
        f"{feature} needs {', '.join(distributions)}: run scripts/setup {extra} (in a "
        f"checkout) or pip install 'groupcoord[{extra}]'"
    )


def missing(modules: Mapping[str, str]) -> list[str]:
    """The distributions of ``modules`` (import name -> pip name) that cannot be imported."""
    absent = []
    for module, distribution in modules.items():
        try:
            importlib.import_module(module)
        except ImportError:
            absent.append(distribution)
    return absent


def require(feature: str, extra: str, modules: Mapping[str, str]) -> None:
    """:class:`click.ClickException` (one line, exit 1) unless every one of ``modules``
    (import name -> pip name) can be imported."""
    absent = missing(modules)
    if absent:
        raise click.ClickException(needs_message(feature, extra, absent))
