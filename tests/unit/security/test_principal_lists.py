"""--super-users / --trusted-gateway-principals: lists of principals whose names may be
certificate subjects with commas of their own."""

from __future__ import annotations

import click
import pytest

from services.security_cli import parse_principals


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", ()),
        ("User:admin", ("User:admin",)),
        ("User:a,User:b", ("User:a", "User:b")),
        ("User:a; User:b", ("User:a", "User:b")),
        ("User:CN=gateway,O=acme", ("User:CN=gateway,O=acme",)),
        (
            "User:CN=gw,OU=eng,O=acme, User:admin;User:CN=gw2,O=acme",
            ("User:CN=gw,OU=eng,O=acme", "User:admin", "User:CN=gw2,O=acme"),
        ),
    ],
)
def test_principal_lists(text: str, expected: tuple[str, ...]) -> None:
    assert parse_principals(text, "--super-users") == expected


@pytest.mark.parametrize("text", ["admin", "User:", "User:a;Group:b", "User:a,,;x"])
def test_what_is_not_a_principal_is_a_usage_error(text: str) -> None:
    with pytest.raises(click.BadParameter, match="is not User:<name>"):
        parse_principals(text, "--super-users")
