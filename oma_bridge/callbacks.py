"""Calling user code that may be sync or async: hooks, scorers, observers."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["invoke"]


async def invoke(callback: Callable[..., Any], *args: Any) -> Any:
    """``callback(*args)``, awaited when it answers with an awaitable."""
    answer = callback(*args)
    if inspect.isawaitable(answer):
        answer = await answer
    return answer
