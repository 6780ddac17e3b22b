"""The agent's stdio: a bounded line reader over a supervised agent process.

ACP frames are newline-delimited JSON on the agent's stdout.  The reader here
is written for the failure modes real agents show (see docs/acp.md):

* a line longer than ``max_line_bytes`` (default 32 MiB) fails the
  connection cleanly instead of growing a buffer without bound;
* CRLF is accepted;
* a line that is not a JSON object (a log line, a shell banner) is logged and
  counted, not fatal; ``max_bad_lines`` of them *in a row* are fatal;
* reading is cancel-safe (partial lines live in the reader, not on the
  stack), because the connection is pumped only while a run waits on it.

The process itself is the shared supervisor's (own process group, stderr
drained into a bounded redacted tail, kill-tree with escapee sweep, crash
watchdog); :class:`AgentProcess` adapts it to a JSON-RPC connection: it is
the stdio :class:`~oma_bridge.backends.acp.transport.AgentTransport`.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping, Sequence

import anyio
import anyio.abc
import orjson

from oma_bridge.backends.acp.transport import BeforeWait
from oma_bridge.errors import BackendError
from oma_bridge.redaction import redact
from oma_bridge.supervision.exits import describe_exit
from oma_bridge.supervision.sandbox import Sandbox
from oma_bridge.supervision.supervisor import SupervisedProcess, default_supervisor

__all__ = [
    "DEFAULT_MAX_BAD_LINES",
    "DEFAULT_MAX_LINE_BYTES",
    "AgentProcess",
    "LineReader",
    "LineTooLongError",
    "MessageReader",
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
    """Splits a byte stream into lines, with a ceiling on each line's length.

    Every whole line of a read is split off at once (one ``split`` in C, the
    lines kept in order until asked for): an agent that writes faster than
    it is read leaves a hundred lines a read, and taking them one ``find``
    and slice at a time cost more than parsing them (docs/benchmarks.md,
    "ACP facade").
    """

    def __init__(
        self, stream: anyio.abc.ByteReceiveStream, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    ) -> None:
        self._stream = stream
        self._max = max_line_bytes
        self._buffer = bytearray()
        #: Whole lines split off the buffer, not returned yet (terminators removed).
        self._ready: deque[bytes] = deque()
        self._scan_from = 0
        self._eof = False

    def has_line(self) -> bool:
        """Whether a whole line is buffered, so :meth:`readline` returns without waiting."""
        return (
            bool(self._ready)
            or self._buffer.find(b"\n", self._scan_from) >= 0
            or (self._eof and bool(self._buffer))
        )

    def ready_line(self) -> bytes | None:
        """The next line if a read already split it off (``None``: await :meth:`readline`).

        For a caller that takes a read's lines without a coroutine each.
        """
        ready = self._ready
        if not ready:
            return None
        line = ready.popleft()
        if len(line) > self._max:  # its newline came in the read that crossed the ceiling
            raise self._too_long()
        if line.endswith(b"\r"):
            line = line[:-1]
        return line

    async def readline(self) -> bytes | None:
        """The next line without its terminator, or ``None`` at end of input.

        A last line without a newline is still returned.
        """
        while True:
            if self._ready:
                return self.ready_line()
            buffer = self._buffer
            end = buffer.rfind(b"\n", self._scan_from)
            if end >= 0:
                self._ready.extend(bytes(buffer[:end]).split(b"\n"))
                del buffer[: end + 1]
                self._scan_from = 0
                continue
            if len(buffer) > self._max:
                raise self._too_long()
            if self._eof:
                if buffer:
                    line = bytes(buffer)
                    buffer.clear()
                    return line
                return None
            self._scan_from = len(buffer)
            try:
                chunk = await self._stream.receive(_CHUNK)
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._eof = True
                continue
            buffer += chunk

    def _too_long(self) -> LineTooLongError:
        return LineTooLongError(
            f"ACP agent wrote a line longer than {self._max} bytes; connection closed"
        )


class MessageReader:
    """JSON objects from stdout lines; non-JSON lines are skipped and counted."""

    def __init__(self, lines: LineReader, max_bad_lines: int = DEFAULT_MAX_BAD_LINES) -> None:
        self._lines = lines
        self._max_bad = max_bad_lines
        self._bad_in_a_row = 0
        #: Lines skipped since the start, for diagnostics and tests.
        self.bad_lines = 0
        #: Awaited whenever the next read would wait on the agent (the
        #: connection flushes held-back text there).
        self.before_wait: BeforeWait | None = None

    async def receive(self) -> object | None:
        lines = self._lines
        while True:
            line = lines.ready_line()
            if line is None:
                if self.before_wait is not None and not lines.has_line():
                    await self.before_wait()
                line = await lines.readline()
                if line is None:
                    return None
            if not line or line.isspace():  # blank (isspace: no stripped copy made)
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


class AgentProcess:
    """One spawned agent over the shared process supervisor: the stdio transport.

    The supervisor (:mod:`oma_bridge.supervision.supervisor`) gives the child its
    own session and process group, drains stderr into a bounded, redacted
    tail from an event-loop callback (so a silent agent flooding stderr never
    blocks, even between runs), and ends the tree with grace, escapee sweep
    and a crash watchdog that kills the tree if the daemon itself dies.
    """

    def __init__(self, process: SupervisedProcess, *, max_line_bytes: int, max_bad_lines: int):
        self.process = process
        self.pid = process.pid
        assert process.stdin is not None
        self._stdin = process.stdin
        self.messages = MessageReader(LineReader(process.stdout, max_line_bytes), max_bad_lines)

    @classmethod
    async def spawn(
        cls,
        command: str,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        labels: Mapping[str, str] | None = None,
        sandbox: Sandbox | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_bad_lines: int = DEFAULT_MAX_BAD_LINES,
    ) -> AgentProcess:
        """Start the agent; ``env`` is the profile's overlay on the daemon's environment.

        ``labels`` go to the supervisor (whose the process is), not to the agent;
        with a ``sandbox`` it runs under bubblewrap (``docs/isolation.md``).
        """
        process = await default_supervisor().spawn(
            [command, *args], env=env, cwd=cwd, labels=labels, sandbox=sandbox
        )
        return cls(process, max_line_bytes=max_line_bytes, max_bad_lines=max_bad_lines)

    @property
    def gone(self) -> bool:
        """The process exited."""
        return self.process.returncode is not None

    def set_before_wait(self, hook: BeforeWait | None) -> None:
        self.messages.before_wait = hook

    async def send(self, data: bytes) -> None:
        """One message as one line (orjson never writes a raw newline inside one)."""
        await self._stdin.send(data + b"\n")

    async def receive(self) -> object | None:
        return await self.messages.receive()

    def diagnostics(self, max_chars: int = 2000) -> str:
        """The redacted end of stderr, cut to whole lines where it can be."""
        text = self.process.stderr.text()
        if len(text) > max_chars:
            text = text[-max_chars:]
            newline = text.find("\n")
            if 0 <= newline < len(text) - 1:
                text = text[newline + 1 :]
        return text

    def describe_end(self) -> str:
        code = self.process.returncode
        return "closed its stdout" if code is None else describe_exit(code)

    async def wait_gone(self, seconds: float) -> None:
        with anyio.move_on_after(seconds):
            await self.process.wait()

    async def close(self, stop_grace_s: float) -> None:
        """End the agent's whole tree within ``stop_grace_s`` + 2 s (docs/contract.md §11.36).

        The supervisor's stop sequence, stdin first: a polite agent leaves
        on EOF.
        """
        with anyio.CancelScope(shield=True):
            await self.process.stop(stop_grace_s, close_stdin_first=True)
