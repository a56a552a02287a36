"""Run ``async def`` tests without an asyncio pytest plugin.

``@async_test`` turns a coroutine function into a plain test function that runs it in a fresh
event loop (``asyncio.run``), so every test gets its own loop and nothing leaks between
tests. Fixtures are requested as usual: pytest reads the parameters of the wrapped
coroutine function.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec

P = ParamSpec("P")


def async_test(fn: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        asyncio.run(fn(*args, **kwargs))

    return run
