"""``Signal``: wake the tasks waiting for a change; costs nothing when nobody waits.
``Handover``: a buffer between a producer and one consumer, built on it.

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
from collections import deque
from typing import Generic, TypeVar

import anyio

__all__ = ["Handover", "Signal"]

T = TypeVar("T")


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


class Handover(Generic[T]):
    """The buffer between a producer and its consumer, at most ``limit`` items ahead.

    An anyio memory stream checkpoints on every ``send`` and ``receive``: two
    trips through the event loop per item, each with an async-library
    look-up, which cost a third of a one-message-per-write ACP relay
    (docs/benchmarks.md, "ACP relay, one message per write").  Here an item
    is appended without a scheduling point while the buffer has room and
    taken without one while items are ready; a side waits (on a
    :class:`Signal`) only when it must: the consumer on an empty buffer, the
    producer on a full one.  ``limit = math.inf`` never holds the producer
    up (a connection's reader, which must not wait for one slow consumer).
    """

    __slots__ = ("_changed", "_closed", "_items", "_limit")

    def __init__(self, limit: float) -> None:
        if limit < 0:
            raise ValueError(f"buffer must be >= 0, got {limit}")
        self._limit = limit
        self._items: deque[T] = deque()
        self._closed = False
        # One signal serves both sides: the consumer waits only on an empty
        # buffer and the producer only on a full one, never both at once.
        self._changed = Signal()

    @property
    def closed(self) -> bool:
        return self._closed

    async def put(self, item: T) -> None:
        """Hand ``item`` over; wait while more than ``limit`` are untaken."""
        self._items.append(item)
        self._changed.notify()
        while len(self._items) > self._limit:
            await self._changed.wait()

    def close(self, *, discard: bool = False) -> None:
        """No more items: a waiting consumer ends once it has taken the rest
        (at once with ``discard``, for a consumer that left)."""
        self._closed = True
        if discard:
            self._items.clear()
        self._changed.notify()

    async def get(self) -> T:
        """The next item; :class:`anyio.EndOfStream` once closed and drained."""
        items = self._items
        while not items:
            if self._closed:
                raise anyio.EndOfStream
            await self._changed.wait()
        item = items.popleft()
        self._changed.notify()  # room for a producer that waits
        return item
