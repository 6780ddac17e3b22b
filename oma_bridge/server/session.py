"""One client connection as method handlers see it: :class:`Session`.

A session knows who the client is (after ``initialize``), what it declared
(hooks, permissions), and how to talk back to it: :meth:`Session.notify` for
``run/event`` and ``oma/progress``, :meth:`Session.request` for the daemon's
own requests (``hook/*``, ``permission/request``).  Work that must end with
the connection (a run it started) belongs in its handler, which the
connection cancels when it closes; work that outlives it (an open agent)
registers :meth:`Session.on_close` to learn that the connection is gone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

import anyio.abc
import anyio.lowlevel
from websockets.exceptions import ConnectionClosed

from oma_bridge.rpc import ConnectionClosedError, Peer, PendingCall
from oma_bridge.server.auth import ListenerKind
from oma_bridge.wire.params import Capabilities, InitializeParams

__all__ = ["Session"]

logger = logging.getLogger("oma_bridge.server")


class Session:
    """One authenticated connection; created at the upgrade, closed with the socket."""

    def __init__(
        self,
        session_id: str,
        listener: ListenerKind,
        peer: Peer,
        *,
        drop: Callable[[], None] | None = None,
    ) -> None:
        self.id = session_id
        self.listener = listener
        #: ``None`` once closed: the peer's handlers reach this session, and a
        #: closed connection must not be a reference cycle (PROTOCOL §23).
        self._peer: Peer | None = peer
        self._drop = drop
        #: Close callbacks by a number of their own, so that an owner can take
        #: its callback back (:meth:`on_close`'s answer) when what it registered
        #: for ends before the connection does.
        self._on_close: dict[int, Callable[[Session], None]] = {}
        self._next_callback = 0
        #: Set by a successful ``initialize``.
        self.init: InitializeParams | None = None
        self.closed = False
        #: A send found the transport gone, before the connection's end was noticed.
        self._gone = False
        #: The connection's own task group (its watchers run there); set by
        #: the gateway while the connection is served.
        self.task_group: anyio.abc.TaskGroup | None = None

    @property
    def initialized(self) -> bool:
        return self.init is not None

    @property
    def capabilities(self) -> Capabilities:
        return self.init.capabilities if self.init is not None else Capabilities()

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification; silently dropped once the connection is gone.

        Gone means the transport too: the socket can fail a send before the
        connection's end is noticed and :attr:`closed` is set, and a run or a
        watcher that notifies must not fail for a client that left.
        """
        peer = self._peer
        if peer is None or self._gone:
            await _dropped()
            return
        try:
            await peer.notify(method, params)
        except (ConnectionClosed, ConnectionClosedError):
            # Every later send would fail the same way, each at the cost of
            # websockets' closing checks: a watcher catching up on thousands of
            # entries for a client that left would spin through all of them.
            self._gone = True
            await _dropped()

    async def notify_encoded(self, data: bytes) -> None:
        """:meth:`notify` of a notification already encoded (the same for several connections)."""
        peer = self._peer
        if peer is None or self._gone:
            await _dropped()
            return
        try:
            await peer.notify_encoded(data)
        except (ConnectionClosed, ConnectionClosedError):
            self._gone = True
            await _dropped()

    def offer(self, data: bytes) -> bool:
        """Send an encoded notification now if that needs no waiting; ``False`` if not sent."""
        peer = self._peer
        return peer is not None and not self._gone and peer.offer_notification(data)

    @property
    def reachable(self) -> bool:
        """Neither closed nor found gone by a send: notifications may still arrive."""
        return not self.closed and not self._gone

    async def request(self, method: str, params: Any = None) -> Any:
        """Ask the client and wait for its answer.

        Bound it with ``anyio.fail_after(hook_timeout_s)`` (or the permission
        timeout): a cancelled wait sends the client ``$/cancel_request
        {"id"}`` and ignores a late answer.  Raises
        :class:`~oma_bridge.errors.WireError` for an error answer and
        :class:`~oma_bridge.rpc.ConnectionClosedError` when the
        connection ends first.
        """
        return await self._open_peer().request(method, params)

    async def start_request(self, method: str, params: Any = None) -> PendingCall:
        """Send a request and return its pending answer (to race several clients)."""
        return await self._open_peer().start_request(method, params)

    def _open_peer(self) -> Peer:
        if self._peer is None:
            raise ConnectionClosedError()
        return self._peer

    def start_soon(self, task: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``task`` for as long as this connection lives."""
        if self.task_group is not None and not self.closed:
            self.task_group.start_soon(task)

    def drop(self) -> None:
        """End the connection now, as a client that stopped reading is ended."""
        if self._drop is not None and not self.closed:
            self._drop()

    def on_close(self, callback: Callable[[Session], None]) -> Callable[[], None]:
        """Call ``callback(session)`` once when the connection ends (or now, if it has).

        Returns what takes the callback back: whoever registers one for
        something that can end first (an agent closed while its connection
        stays open) calls it then, so the connection holds nothing of it.
        """
        if self.closed:
            callback(self)
            return _nothing
        key = self._next_callback
        self._next_callback += 1
        self._on_close[key] = callback

        def remove() -> None:
            self._on_close.pop(key, None)

        return remove

    def close(self) -> None:
        """Mark the session closed and run its close callbacks (the connection does this)."""
        if self.closed:
            return
        self.closed = True
        self._peer = None
        self.task_group = None
        callbacks, self._on_close = self._on_close, {}
        for callback in callbacks.values():
            try:
                callback(self)
            except Exception:
                logger.exception("a close callback of connection %s failed", self.id)


def _nothing() -> None:
    return None


async def _dropped() -> None:
    """A dropped notification is still a scheduling point: a loop that notifies
    a gone client must let the event loop run (and its own cancellation reach
    it) instead of spinning."""
    await anyio.lowlevel.checkpoint()
