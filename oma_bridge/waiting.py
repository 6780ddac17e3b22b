"""``Signal``: wake the tasks waiting for a change; costs nothing when nobody waits.

Streams change state once per event (a journal entry, a buffered stream
event, a frame sent), and most changes have nobody waiting.  An
:class:`anyio.Event` made and set per change would cost more than the
change (each one looks the async library up), so a waiter here is a plain
loop future, made only by a task that waits, one per waiter: cancelling one
waiter (a cancel scope cancels its task, and with it the future it awaits)
leaves the others waiting.  The daemon and the library run on asyncio.
"""

from __future__ import annotations

import asyncio

__all__ = ["Signal"]


class Signal:
    """Wakes every task waiting on it; see the module docstring."""

    __slots__ = ("_waiters",)

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    def notify(self) -> None:
        if not self._waiters:
            return
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self) -> None:
        """Return at the next :meth:`notify` (check the condition again: it may not hold)."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self._waiters:  # cancelled before a notify came
                self._waiters.remove(waiter)
