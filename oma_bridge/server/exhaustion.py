"""Out of file descriptors: new connections are refused clearly, not left hanging.

When ``accept(2)`` fails with EMFILE (or ENFILE, ENOBUFS, ENOMEM), asyncio
logs a traceback and retries a second later, while the client waits in the
listen backlog with nothing to tell it why.  :class:`ConnectionRefuser`
keeps one descriptor in reserve; at that moment it gives it up, accepts
the connections that wait, answers each ``503`` with the reason (after
its request came in, so that the answer is not lost to a reset), and takes
its reserve back.  Clients fail at once with a message that says what is
wrong, and connect again as soon as descriptors are free.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import resource
import select
import socket
import time
from typing import Any

__all__ = ["ConnectionRefuser"]

logger = logging.getLogger("oma_bridge.server")

_ACCEPT_OUT_OF_RESOURCES = "socket.accept() out of system resource"
_BODY = b"oma-bridge is out of file descriptors; try again shortly\n"
_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    + f"Content-Length: {len(_BODY)}\r\n".encode()
    + b"Connection: close\r\n\r\n"
    + _BODY
)
#: At most this many waiting connections are refused per attempt of asyncio's.
_REFUSE_AT_ONCE = 64
_WARN_EVERY_S = 10.0
#: How long, at most, the requests of the connections refused at one attempt
#: are waited for, all together (the loop stands still meanwhile).
_REQUEST_WAIT_S = 0.05
#: How often a reserve that could not be taken back is tried again.
_RETAKE_S = 0.05


class ConnectionRefuser:
    """Install on the running loop for the daemon's lifetime (see the module docstring)."""

    def __init__(self) -> None:
        self._spare = -1
        self._refused = 0
        self._warned_at = -math.inf
        self._previous: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._retake: asyncio.TimerHandle | None = None

    def install(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._take_spare()
        self._previous = self._loop.get_exception_handler()
        self._loop.set_exception_handler(self._handle)

    def uninstall(self) -> None:
        if self._retake is not None:
            self._retake.cancel()
            self._retake = None
        if self._loop is not None:
            self._loop.set_exception_handler(self._previous)
            self._loop = None
        self._release_spare()

    def _handle(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        listener = context.get("socket")
        if context.get("message") != _ACCEPT_OUT_OF_RESOURCES or listener is None:
            if self._previous is not None:
                self._previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        refused = self.refuse_waiting(listener.fileno())
        self._refused += refused
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY_S:
            self._warned_at = now
            limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            logger.warning(
                "out of file descriptors (limit %d): refusing new connections with 503 (%d so far)",
                limit,
                self._refused,
            )

    def refuse_waiting(self, listener_fd: int) -> int:
        """Answer the connections waiting on ``listener_fd`` with 503; how many."""
        listener = socket.socket(fileno=listener_fd)  # a view: no descriptor of its own
        refused = 0
        deadline = time.monotonic() + _REQUEST_WAIT_S
        try:
            listener.setblocking(False)
            while refused < _REFUSE_AT_ONCE:
                self._release_spare()
                try:
                    connection, _ = listener.accept()
                except OSError:
                    break  # none waiting (EAGAIN), or still no descriptor to take one
                with connection:
                    _refuse(connection, max(0.0, deadline - time.monotonic()))
                refused += 1
        finally:
            listener.detach()
            self._take_spare()
        return refused

    @property
    def holds_reserve(self) -> bool:
        """Whether the reserve descriptor is held (it is, but for a moment at the limit)."""
        return self._spare >= 0

    def _take_spare(self) -> None:
        if self._spare >= 0:
            return
        with contextlib.suppress(OSError):
            self._spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        if self._spare < 0 and self._loop is not None and self._retake is None:
            # Another thread took the descriptor just freed (a spawn's pipe, a
            # session file): without a reserve the next connection at the limit
            # would wait unanswered, and nothing else would try again, since
            # every later attempt comes at the limit.  Tried until it is held.
            self._retake = self._loop.call_later(_RETAKE_S, self._take_spare_again)

    def _take_spare_again(self) -> None:
        self._retake = None
        self._take_spare()

    def _release_spare(self) -> None:
        if self._spare >= 0:
            os.close(self._spare)
            self._spare = -1


def _refuse(connection: socket.socket, wait_s: float) -> None:
    with contextlib.suppress(OSError):
        connection.setblocking(False)
        # Read the client's request before closing: a socket closed with
        # unread data resets the connection (a unix socket's peer then reads
        # ECONNRESET, not the answer). A client sends its request right after
        # connecting, so it is waited for, briefly: poll(2) takes no
        # descriptor, and this runs only while the daemon is out of them.
        waiting = select.poll()
        waiting.register(connection, select.POLLIN)
        waiting.poll(round(wait_s * 1000))
        with contextlib.suppress(BlockingIOError):
            connection.recv(65536)
        connection.send(_RESPONSE)
        connection.shutdown(socket.SHUT_WR)
