"""A bound on the run events the event loop relays per iteration (docs/internals.md D23).

asyncio runs every callback that is ready when an iteration starts before
it looks at its sockets again.  Under a load of many streams, each one is
ready at every iteration (an event relayed, a checkpoint, the next event),
so an iteration serves one event of every stream: with 200 streams some
20-50 ms, 100 at the worst (docs/benchmarks.md, "Load").  A request on a
quiet connection (``daemon/status``) needs two or three iterations to be
read, served and written, and waits for all of them.

:class:`Turnstile` lets :data:`PER_TICK` events through per iteration; the
events after those wait, in the order they came, for the iterations that
follow.  The loop then reaches its sockets every few milliseconds whatever
the number of streams, and relays as many events a second (the same work,
in shorter iterations).  An event that finds the turnstile free passes
without waiting: an idle daemon adds no latency, and one stream waits only
when it has more than :data:`PER_TICK` events ready in one iteration (a
batch read from an agent's pipe), once per :data:`PER_TICK` events.

Asyncio's (the daemon runs on it): "an iteration" is what a callback
scheduled with ``call_soon`` marks.
"""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["PER_TICK", "Turnstile"]

#: Events let through per event-loop iteration.  At ~50-100 µs of the
#: daemon's work an event on the loaded 2-core machine, 32 keep an iteration
#: to a few milliseconds; a forced wait every 32 events costs a single
#: stream about one loop iteration (~15 µs) per 32 events.
PER_TICK = 32


class Turnstile:
    """At most ``per_tick`` passes per event-loop iteration; the rest wait in order."""

    def __init__(self, per_tick: int = PER_TICK) -> None:
        if per_tick < 1:
            raise ValueError(f"per_tick must be at least 1, not {per_tick}")
        self._per_tick = per_tick
        #: Passes counted against the current iteration (waiters woken included).
        self._passed = 0
        #: The iteration's callback (:meth:`_next_tick`) is scheduled.
        self._ticking = False
        self._waiting: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        """Callers waiting for a later iteration (cancelled ones included until skipped)."""
        return len(self._waiting)

    def pass_now(self) -> bool:
        """Let the caller through if this iteration has room (``False``: await :meth:`turn`).

        The pass of a caller that must not pay for a coroutine when it need
        not wait (a stream's every event).
        """
        if not self._ticking:
            self._ticking = True
            asyncio.get_running_loop().call_soon(self._next_tick)
        if self._passed < self._per_tick and not self._waiting:
            self._passed += 1
            return True
        return False

    async def turn(self) -> None:
        """Return at once if this iteration has room, else once a later one does.

        Cancellable while it waits; a waiter cancelled after it was let
        through only leaves its place unused.
        """
        if self.pass_now():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        await waiter

    def _next_tick(self) -> None:
        """A new iteration: let the first waiters through; come back while any are left."""
        self._passed = 0
        waiting = self._waiting
        while waiting and self._passed < self._per_tick:
            waiter = waiting.popleft()
            if not waiter.done():  # a cancelled caller's future is done
                waiter.set_result(None)
                self._passed += 1
        if waiting:
            # The woken callers run in the next iteration, and so does this:
            # each iteration lets ``per_tick`` of them through, in order.
            asyncio.get_running_loop().call_soon(self._next_tick)
        else:
            self._ticking = False
