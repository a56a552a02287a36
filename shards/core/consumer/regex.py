"""Regular-expression subscriptions: RE2 syntax (google-re2), matched against whole topic
names, as Kafka's coordinator does with RE2/J.

A regex is compiled once per process (patterns are immutable values, cached by text).
Resolution is against a catalog image; the result is persisted per group and regex
(record type 16) so that a reloaded group assigns from exactly the same topics.
"""

from __future__ import annotations

import functools
from typing import Any

import re2

from shards.core.errors import ApiError, Errors
from shards.core.topics import TopicsImage

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # errors are reported to the client, not to stderr


@functools.lru_cache(maxsize=1024)
def _compile(regex: str) -> Any:
    return re2.compile(regex, options=_OPTIONS)


# RE2's error texts (C++) -> RE2/J's descriptions, which Kafka puts in its error message.
_RE2J_DESCRIPTIONS = {
    "invalid escape sequence": "invalid escape sequence",
    "invalid character class": "invalid character class",
    "invalid character class range": "invalid character class range",
    "missing ]": "missing closing ]",
    "missing )": "missing closing )",
    "unexpected )": "unexpected )",
    "trailing \\": "trailing backslash at end of expression",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid UTF-8": "invalid UTF-8",
    "invalid named capture group": "invalid named capture",
}


def _description(error: object) -> str:
    text = error.decode("utf-8", "replace") if isinstance(error, bytes) else str(error)
    code, _, fragment = text.partition(": ")
    if code == "invalid perl operator" and fragment.startswith("(?<"):
        return "invalid named capture"  # RE2/J reads "(?<" as a named group
    return _RE2J_DESCRIPTIONS.get(code, text)


def compile_regex(regex: str) -> Any:
    """The compiled pattern, or ApiError(INVALID_REGULAR_EXPRESSION) with Kafka's message."""
    try:
        return _compile(regex)
    except re2.error as ex:
        detail = _description(ex.args[0] if ex.args else ex)
        raise ApiError(
            Errors.INVALID_REGULAR_EXPRESSION,
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {detail}.",
        ) from None


def resolve(regex: str, image: TopicsImage) -> tuple[str, ...]:
    """The names of the catalog's topics the regex matches entirely, sorted."""
    pattern = compile_regex(regex)
    return tuple(name for name in sorted(image.by_name) if pattern.fullmatch(name) is not None)
