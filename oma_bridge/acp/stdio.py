"""The agent's stdio: a bounded line reader, a stderr ring buffer, and the process tree.

ACP frames are newline-delimited JSON on the agent's stdout.  The reader here
is written for the failure modes real agents show (acp-client.md §10):

* a line longer than ``max_line_bytes`` (default 32 MiB) fails the
  connection cleanly instead of growing a buffer without bound;
* CRLF is accepted;
* a line that is not a JSON object (a log line, a shell banner) is logged and
  counted, not fatal; ``max_bad_lines`` of them *in a row* are fatal;
* reading is cancel-safe (partial lines live in the reader, not on the
  stack), because the connection is pumped only while a run waits on it.

stderr is drained into a bounded ring buffer whose redacted tail is attached
to crash messages: an undrained pipe blocks the agent (a Python agent writing
1 MiB to stderr deadlocks the official SDK's client).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from subprocess import PIPE
from typing import Any

import anyio
import anyio.abc
import orjson
import psutil

from ..errors import BackendError
from ..redaction import redact

__all__ = [
    "DEFAULT_MAX_BAD_LINES",
    "DEFAULT_MAX_LINE_BYTES",
    "AgentProcess",
    "LineReader",
    "LineTooLongError",
    "StderrRing",
    "TooManyBadLinesError",
]

logger = logging.getLogger(__name__)

DEFAULT_MAX_LINE_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_BAD_LINES = 100
_CHUNK = 256 * 1024


class LineTooLongError(BackendError):
    """The agent wrote a line longer than the reader's ceiling."""


class TooManyBadLinesError(BackendError):
    """Too many consecutive stdout lines were not JSON objects."""


class LineReader:
    """Splits a byte stream into lines, with a ceiling on each line's length."""

    def __init__(
        self, stream: anyio.abc.ByteReceiveStream, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    ) -> None:
        self._stream = stream
        self._max = max_line_bytes
        self._buffer = bytearray()
        self._scan_from = 0
        self._eof = False

    async def readline(self) -> bytes | None:
        """The next line without its terminator, or ``None`` at end of input.

        A last line without a newline is still returned.
        """
        while True:
            index = self._buffer.find(b"\n", self._scan_from)
            if index >= 0:
                line = bytes(self._buffer[:index])
                del self._buffer[: index + 1]
                self._scan_from = 0
                if line.endswith(b"\r"):
                    line = line[:-1]
                return line
            if len(self._buffer) > self._max:
                raise LineTooLongError(
                    f"ACP agent wrote a line longer than {self._max} bytes; connection closed"
                )
            if self._eof:
                if self._buffer:
                    line = bytes(self._buffer)
                    self._buffer.clear()
                    return line
                return None
            self._scan_from = len(self._buffer)
            try:
                chunk = await self._stream.receive(_CHUNK)
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._eof = True
                continue
            self._buffer += chunk


class MessageReader:
    """JSON objects from stdout lines; non-JSON lines are skipped and counted."""

    def __init__(self, lines: LineReader, max_bad_lines: int = DEFAULT_MAX_BAD_LINES) -> None:
        self._lines = lines
        self._max_bad = max_bad_lines
        self._bad_in_a_row = 0
        #: Lines skipped since the start, for diagnostics and tests.
        self.bad_lines = 0

    async def receive(self) -> object | None:
        while True:
            line = await self._lines.readline()
            if line is None:
                return None
            if not line.strip():
                continue
            try:
                message = orjson.loads(line)
            except orjson.JSONDecodeError:
                message = None
            if isinstance(message, dict | list):
                self._bad_in_a_row = 0
                return message
            self.bad_lines += 1
            self._bad_in_a_row += 1
            logger.warning("ACP agent stdout: skipped a non-JSON line: %.200s", redact(_text(line)))
            if self._bad_in_a_row >= self._max_bad:
                raise TooManyBadLinesError(
                    f"ACP agent wrote {self._bad_in_a_row} non-JSON lines in a row on stdout"
                )


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


@dataclass
class StderrRing:
    """The last ``limit`` bytes of the agent's stderr."""

    limit: int = 64 * 1024
    _chunks: deque[bytes] = field(default_factory=deque)
    _size: int = 0

    def feed(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._size += len(chunk)
        while self._size > self.limit and len(self._chunks) > 1:
            self._size -= len(self._chunks.popleft())
        if self._size > self.limit:
            only = self._chunks.pop()[-self.limit :]
            self._chunks.append(only)
            self._size = len(only)

    def tail(self, max_chars: int = 2000) -> str:
        """The redacted tail, trimmed to whole lines where it can be."""
        text = _text(b"".join(self._chunks)).strip()
        if len(text) > max_chars:
            text = text[-max_chars:]
            newline = text.find("\n")
            if 0 <= newline < len(text) - 1:
                text = text[newline + 1 :]
        return redact(text)


class AgentProcess:
    """One spawned agent: its pipes, its process group, and their end.

    The child starts in a new session (its own process group), never through
    a shell.  :meth:`terminate` ends the whole tree: it closes stdin, waits,
    sends SIGTERM to the group, waits, sends SIGKILL to the group and to
    every descendant seen at any point (escapees that left the group).
    """

    def __init__(self, process: anyio.abc.Process, *, max_line_bytes: int, max_bad_lines: int):
        self.process = process
        self.pid = process.pid
        assert process.stdout is not None and process.stdin is not None
        self.messages = MessageReader(LineReader(process.stdout, max_line_bytes), max_bad_lines)
        self.stderr = StderrRing()
        self._stdin = process.stdin
        self._known: dict[int, psutil.Process] = {}
        self._stderr_done = anyio.Event()
        self._remember_descendants()

    @classmethod
    async def spawn(
        cls,
        command: str,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_bad_lines: int = DEFAULT_MAX_BAD_LINES,
    ) -> AgentProcess:
        process = await anyio.open_process(
            [command, *args],
            stdin=PIPE,
            stdout=PIPE,
            stderr=PIPE,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
        )
        return cls(process, max_line_bytes=max_line_bytes, max_bad_lines=max_bad_lines)

    # -- pipes -----------------------------------------------------------------

    async def send_line(self, data: bytes) -> None:
        await self._stdin.send(data + b"\n")

    async def receive(self) -> object | None:
        return await self.messages.receive()

    async def drain_stderr(self) -> None:
        """Read stderr into the ring until EOF (run it while the agent is served)."""
        stream = self.process.stderr
        if stream is None or self._stderr_done.is_set():
            return
        try:
            while True:
                chunk = await stream.receive(_CHUNK)
                self.stderr.feed(chunk)
                if logger.isEnabledFor(logging.DEBUG):
                    logger.debug("ACP agent %d stderr: %s", self.pid, redact(_text(chunk)))
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._stderr_done.set()

    # -- exit and end ----------------------------------------------------------

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def exit_description(self) -> str:
        code = self.process.returncode
        if code is None:
            return "closed its stdout"
        if code < 0:
            try:
                return f"exited with signal {signal.Signals(-code).name}"
            except ValueError:
                return f"exited with signal {-code}"
        return f"exited with code {code}"

    async def wait_exit(self, seconds: float) -> int | None:
        with anyio.move_on_after(seconds):
            return await self.process.wait()
        return self.process.returncode

    def _remember_descendants(self) -> None:
        try:
            root = psutil.Process(self.pid)
            for child in root.children(recursive=True):
                self._known.setdefault(child.pid, child)
        except psutil.Error:
            pass

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    async def terminate(self, stop_grace_s: float, eof_grace_s: float = 1.0) -> None:
        """End the agent's whole process tree; returns when it is gone."""
        with anyio.CancelScope(shield=True):
            self._remember_descendants()
            with contextlib.suppress(Exception):  # a broken pipe: the agent is going anyway
                await self._stdin.aclose()
            if self.process.returncode is None:
                await self.wait_exit(eof_grace_s)
            self._remember_descendants()
            self._signal_group(signal.SIGTERM)
            await self._wait_group_gone(stop_grace_s)
            self._signal_group(signal.SIGKILL)
            for proc in list(self._known.values()):
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            await self.wait_exit(2.0)
            await self._wait_known_gone(2.0)
            await self._close_pipes()

    async def _wait_known_gone(self, seconds: float) -> None:
        """SIGKILL is delivered asynchronously: wait until every escapee is dead."""
        with anyio.move_on_after(seconds):
            # Polling: nothing signals the death of a process that is not our child.
            while any(_running(proc) for proc in self._known.values()):  # noqa: ASYNC110
                await anyio.sleep(0.02)

    async def _wait_group_gone(self, seconds: float) -> None:
        with anyio.move_on_after(seconds):
            while self._group_alive() or self.process.returncode is None:
                if self.process.returncode is None:
                    await self.wait_exit(0.05)
                else:
                    await anyio.sleep(0.05)

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    async def _close_pipes(self) -> None:
        with contextlib.suppress(Exception), anyio.move_on_after(1):  # dead pipes fail harmlessly
            await self.process.aclose()


def child_environment(extra: Mapping[str, str]) -> dict[str, Any]:
    """The agent's environment: the daemon's, with the profile's ``env`` merged over it."""
    return {**os.environ, **extra}


def _running(proc: psutil.Process) -> bool:
    """Alive and not a zombie (a zombie is dead; only its entry waits to be reaped)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
