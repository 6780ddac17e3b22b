"""Which event loop a process runs: asyncio's, or uvloop where it is installed (issue 30).

``[server] event_loop`` for ``oma-bridge serve`` and ``--event-loop`` for
``oma-bridge acp`` take the same three values; both default to ``asyncio``.
A leaf: the ACP shim imports it at start, so it imports nothing beyond the
standard library until uvloop is asked for.  Why asyncio by default (uvloop
made process runs slower): the figures in docs/benchmarks.md, "Event loop:
uvloop against asyncio".
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Literal

__all__ = [
    "EVENT_LOOPS",
    "EventLoopChoice",
    "EventLoopError",
    "LoopName",
    "loop_factory",
    "resolve_event_loop",
    "running_loop_name",
]

EventLoopChoice = Literal["auto", "asyncio", "uvloop"]
LoopName = Literal["asyncio", "uvloop"]
EVENT_LOOPS: tuple[EventLoopChoice, ...] = ("auto", "asyncio", "uvloop")


class EventLoopError(Exception):
    """``uvloop`` asked for where it is not installed (the message names the fix)."""


def resolve_event_loop(choice: EventLoopChoice) -> LoopName:
    """The loop ``choice`` means here: ``auto`` is uvloop when importable, else asyncio."""
    if choice == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401  (importable, not merely present)
    except ImportError:
        pass
    else:
        return "uvloop"
    if choice == "uvloop":
        raise EventLoopError(
            'event_loop = "uvloop" but uvloop is not installed: '
            'pip install \'oma-bridge[fast]\', or choose "auto" or "asyncio"'
        )
    return "asyncio"


def loop_factory(name: LoopName) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The ``loop_factory`` of :class:`asyncio.Runner` for ``name`` (``None``: asyncio's)."""
    if name == "asyncio":
        return None
    import uvloop

    return uvloop.new_event_loop


def running_loop_name() -> LoopName:
    """``uvloop`` or ``asyncio``: the calling task's loop (for the log and ``daemon/status``)."""
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.split(".", 1)[0] == "uvloop" else "asyncio"
