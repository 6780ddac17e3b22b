"""The three pipes of a supervised child, on asyncio's subprocess protocol.

Why a protocol instead of ``asyncio.subprocess.Process`` or
``anyio.open_process``: the protocol's callbacks run whenever the event loop
has data, whether or not a task is reading.  stderr goes straight into a
bounded tail that way, so it is drained even between two turns of a
long-lived ACP agent, with no task to own.  stdout is buffered up to a high
water mark, past which reading pauses (the child then blocks, as it would on
a full pipe) until the owner catches up.  The owner sees stdout and stdin as
anyio byte streams.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Callable
from typing import cast

import anyio
import anyio.abc

from oma_bridge.redaction import redact

__all__ = ["DEFAULT_STDERR_TAIL_BYTES", "ChildProtocol", "StderrTail"]

DEFAULT_STDERR_TAIL_BYTES = 64 * 1024
#: stdout buffered past this pauses reading from the child; resumes below LOW.
_STDOUT_HIGH = 1024 * 1024
_STDOUT_LOW = 256 * 1024
_CONTINUATION_BYTES = bytes(range(0x80, 0xC0))


class StderrTail:
    """The last ``limit`` bytes a child wrote to stderr."""

    def __init__(self, limit: int = DEFAULT_STDERR_TAIL_BYTES) -> None:
        self.limit = limit
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data
        excess = len(self._buffer) - self.limit
        if excess > 0:
            del self._buffer[:excess]  # cheap: a bytearray trims its head in place

    def text(self) -> str:
        """The tail decoded, trimmed and redacted (``""`` when empty)."""
        data = bytes(self._buffer)
        if len(data) == self.limit:
            # The cut may have split a line, and in it a secret whose end alone
            # redaction could not tell: the tail starts at the next whole line.
            newline = data.find(b"\n")
            if 0 <= newline < len(data) - 1:
                data = data[newline + 1 :]
            # Or, with no whole line left, a character: drop its continuation bytes.
            data = data.lstrip(_CONTINUATION_BYTES)
        return redact(data.decode("utf-8", "replace").strip())


def _pipe(protocol: weakref.ref[ChildProtocol], fd: int, method: str, *args: bytes) -> None:
    """``ChildProtocol.pipe`` while the protocol lives (gone: the child's pipes are too)."""
    alive = protocol()
    if alive is not None:
        alive.pipe(fd, method, *args)


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class ChildStdout(anyio.abc.ByteReceiveStream):
    """The child's stdout as an anyio byte stream (``EndOfStream`` at its end)."""

    def __init__(self, protocol: ChildProtocol) -> None:
        # Weak: the protocol holds this stream, and a run's objects must go
        # when it ends, not at the next cyclic collection (PROTOCOL §23).
        self._protocol = weakref.ref(protocol)
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._eof = False
        self._closed = False
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None

    def feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        _wake(self._waiter)
        if self._buffered > _STDOUT_HIGH and not self._paused:
            self._paused = True
            _pipe(self._protocol, 1, "pause_reading")

    def feed_eof(self) -> None:
        self._eof = True
        _wake(self._waiter)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while not self._chunks:
            if self._closed:
                raise anyio.ClosedResourceError
            if self._eof:
                raise anyio.EndOfStream
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        chunk = self._chunks.popleft()
        if len(chunk) > max_bytes:
            self._chunks.appendleft(chunk[max_bytes:])
            chunk = chunk[:max_bytes]
        self._buffered -= len(chunk)
        if self._paused and self._buffered <= _STDOUT_LOW:
            self._paused = False
            _pipe(self._protocol, 1, "resume_reading")
        return chunk

    async def aclose(self) -> None:
        self._closed = True
        self._chunks.clear()
        _wake(self._waiter)
        _pipe(self._protocol, 1, "close")


class ChildStdin(anyio.abc.ByteSendStream):
    """The child's stdin as an anyio byte stream; a gone reader is ``BrokenResourceError``."""

    def __init__(self, protocol: ChildProtocol) -> None:
        self._protocol = weakref.ref(protocol)  # weak: as ChildStdout's
        self._closed = False
        self._lost = False
        self._paused = False
        self._drain: asyncio.Future[None] | None = None

    async def send(self, item: bytes) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        if self._lost:
            raise anyio.BrokenResourceError
        _pipe(self._protocol, 0, "write", item)
        while self._paused and not self._lost:
            self._drain = asyncio.get_running_loop().create_future()
            try:
                await self._drain
            finally:
                self._drain = None
        if self._lost:
            raise anyio.BrokenResourceError

    async def aclose(self) -> None:
        self._closed = True
        _pipe(self._protocol, 0, "close")

    def write_and_close(self, data: bytes) -> None:
        """Queue ``data`` and close stdin once it is flushed; never blocks.

        For a payload already in memory (a prompt): the loop writes it as the
        child reads, so no task has to wait on the pipe, and a child that
        exits without reading is no error.
        """
        if self._closed or self._lost:
            return
        self._closed = True
        if data:
            _pipe(self._protocol, 0, "write", data)
        _pipe(self._protocol, 0, "close")

    def set_paused(self, paused: bool) -> None:
        self._paused = paused
        if not paused:
            _wake(self._drain)

    def pipe_lost(self) -> None:
        self._lost = True
        _wake(self._drain)


class ChildProtocol(asyncio.SubprocessProtocol):
    """Routes a child's pipes: stdout to :class:`ChildStdout`, stderr to a tail."""

    def __init__(self, stderr: StderrTail) -> None:
        #: Called once the child has exited (the supervisor sweeps its group).
        self.on_exit: Callable[[], None] | None = None
        self.stdout = ChildStdout(self)
        self.stdin = ChildStdin(self)
        self.stderr = stderr
        self.exited = asyncio.Event()
        #: Set once the child exited and every pipe reached its end.
        self.closed = asyncio.Event()
        self.transport: asyncio.SubprocessTransport | None = None

    def pipe(self, fd: int, method: str, *args: bytes) -> None:
        """Call ``method`` of the child's pipe ``fd`` while it is open."""
        pipe = self.transport.get_pipe_transport(fd) if self.transport else None
        if pipe is not None and not pipe.is_closing():
            getattr(pipe, method)(*args)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A subprocess transport by duck type: uvloop's has the same methods
        # without subclassing asyncio's (``[server] event_loop``, issue 30).
        self.transport = cast("asyncio.SubprocessTransport", transport)

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        assert isinstance(data, bytes)
        if fd == 1:
            self.stdout.feed(data)
        else:
            self.stderr.feed(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 0:
            self.stdin.pipe_lost()
        elif fd == 1:
            self.stdout.feed_eof()

    def pause_writing(self) -> None:
        self.stdin.set_paused(True)

    def resume_writing(self) -> None:
        self.stdin.set_paused(False)

    def process_exited(self) -> None:
        self.exited.set()
        # Called once, then dropped: the callback is the child's handle, which
        # holds this protocol (a cycle a finished run must not leave for the
        # cyclic collector, docs/benchmarks.md "Load").
        on_exit, self.on_exit = self.on_exit, None
        if on_exit is not None:
            on_exit()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()
