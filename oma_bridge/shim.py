"""``oma-bridge acp <profile>``: an ACP agent on stdio that is the daemon's ``/acp/<profile>``.

An editor starts one per agent session, so the shim is small and quick to
start: it imports the standard library and ``websockets`` only (no pydantic,
no agent layer, not the server).  Each line of stdin is sent as one
websocket frame as soon as it arrives, and each frame is written to stdout
as one line, flushed: nothing is buffered that a turn could feel.  stdout
carries ACP only; every diagnostic goes to stderr.

The shim offers ``oma-bridge.acp-lines`` before ``acp.v1``: a daemon that
selects it may put several messages in one frame, each followed by ``\n``
(D24, :mod:`oma_bridge.wire.acp_lines`), and such a frame is written as it
came, its lines in one write.  It is the daemon that joins, and only
messages that were waiting anyway; a daemon that selects ``acp.v1`` sends
one message per frame, and each gets its newline here.

The daemon is found as PROTOCOL §18.2 says (``--url`` or ``$OMA_BRIDGE_URL``,
else the discovery files in order: :mod:`oma_bridge.client.discovery`, the
lookup the command line and the client share).  When none answers anywhere,
the shim starts one (``oma-bridge serve``, in a session of its own, logging
to ``<state>/daemon.log``), waits for it and says on stderr, in one line,
which daemon it started (its pid, config and discovery file), unless
``--no-autostart`` is given: then it answers the client's first request with
an error that names the cause.  Closing stdin ends the shim and only
detaches its sessions; the daemon and its agents go on.  Answers to requests
already sent still go out for up to :data:`_EOF_GRACE_S` (a script that
writes its requests and closes stdin gets them); a turn still running then
goes on in the daemon without the shim.  stdin may be a pipe (what editors
give), a file, a terminal or ``/dev/null``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect, unix_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from oma_bridge.client.discovery import Discovery, find_daemons, url_from_environment
from oma_bridge.event_loop import EventLoopError, loop_factory, resolve_event_loop
from oma_bridge.paths import default_config_path, default_state_dir
from oma_bridge.private_files import make_private_folder, open_private
from oma_bridge.wire.acp_lines import ACP_LINES_SUBPROTOCOL

__all__ = ["main"]

#: How long a started daemon may take to write its discovery file.
_START_TIMEOUT_S = 20.0
#: The ACP line ceiling of the relay (a frame as large as the daemon takes).
_MAX_LINE = 64 * 1024 * 1024
#: After stdin ends, how long answers to requests already sent may still come.
_EOF_GRACE_S = 2.0
_NOTIFICATION_PREFIX = b'{"jsonrpc":"2.0","method":'
_NEXT_NOTIFICATION = b"\n" + _NOTIFICATION_PREFIX


class Unreachable(Exception):
    """No daemon answers where the shim looked (the reason is the message)."""

    name, exit_status = "Unreachable", 3


class Refused(Exception):
    """The daemon answered the upgrade with an HTTP error: an unknown profile (404),
    a token it does not take (401, 403)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status
        self.name = "NotFound" if status == 404 else "Forbidden"
        self.exit_status = 2 if status == 404 else 4


def _say(message: str) -> None:
    print(f"oma-bridge acp: {message}", file=sys.stderr, flush=True)


async def _upgrade(opening: Awaitable[ClientConnection], profile: str) -> ClientConnection:
    """The websocket of ``opening``; else :class:`Refused` or :class:`Unreachable`, saying why."""
    try:
        return await opening
    except InvalidStatus as error:
        status = error.response.status_code
        if status == 404:
            raise Refused(
                f'the daemon has no agent profile named "{profile}"', status=status
            ) from None
        raise Refused(f"the daemon refused the connection: HTTP {status}", status=status) from None
    except (OSError, ConnectionClosed, TimeoutError) as error:
        raise Unreachable(f"cannot connect to the daemon: {error}") from None


async def _open(
    profile: str, url: str | None, token: str | None, ca_file: Path | None
) -> tuple[ClientConnection, Discovery | None]:
    """The websocket to ``/acp/<profile>`` of the daemon at ``url``, else of the first
    discovery file (PROTOCOL §18.2) whose daemon answers, with that file."""
    path = f"/acp/{profile}"
    options: dict[str, Any] = {
        "compression": None,
        "max_size": None,
        "open_timeout": 10,
        # acp-lines first: the daemon selects the first it knows (D24).
        "subprotocols": [ACP_LINES_SUBPROTOCOL, "acp.v1"],
    }
    if url is not None:
        target = url.rstrip("/") + path
        if token:
            options["additional_headers"] = {"Authorization": f"Bearer {token}"}
        if target.startswith("wss://"):
            options["ssl"] = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        return await _upgrade(connect(target, **options), profile), None
    found, reasons = find_daemons()
    for discovery in found:
        each = {**options, "additional_headers": {"Authorization": f"Bearer {discovery.token}"}}
        if discovery.socket:
            opening = unix_connect(discovery.socket, f"ws://localhost{path}", **each)
        elif discovery.url:
            opening = connect(discovery.url.rstrip("/") + path, **each)
        else:
            reasons.append(f"the discovery file {discovery.path} names neither a socket nor a url")
            continue
        try:
            return await _upgrade(opening, profile), discovery
        except Unreachable as error:
            reasons.append(f"{discovery.path}: {error}")
    raise Unreachable(f"no daemon is running ({'; '.join(reasons)})")


def _start_daemon() -> Path:
    """``oma-bridge serve`` detached from the shim, logging to the state folder.

    Detached twice over: in a session of its own (the client's signals to the
    shim's process group miss it), and not a descendant of the shim (a
    middle process starts it and exits at once, so init adopts it).  Clients
    that clean up after an agent by killing every process it started (acpx
    walks the process tree) would otherwise end the daemon, and every
    session in it, with the first shim.
    """
    log_dir = default_state_dir()
    try:
        make_private_folder(log_dir)
        log_fd = open_private(log_dir / "daemon.log")
    except OSError as error:  # a state folder others can reach, say: the daemon would refuse it
        raise Unreachable(f"cannot start a daemon: {error}") from None
    with os.fdopen(log_fd, "ab") as log:
        middle = os.fork()
        if middle == 0:  # pragma: no cover (the middle process: it only starts the daemon)
            status = 1
            try:
                os.setsid()
                subprocess.Popen(
                    [sys.executable, "-m", "oma_bridge.cli", "serve"],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    close_fds=True,
                )
                status = 0
            finally:
                os._exit(status)
        os.waitpid(middle, 0)
    return log_dir / "daemon.log"


async def _connect(profile: str, args: Any) -> ClientConnection:
    token = args.token_file.read_text().strip() if args.token_file else None
    url = url_from_environment(args.url)
    try:
        ws, _ = await _open(profile, url, token, args.ca_file)
        return ws
    except Unreachable as error:
        if args.no_autostart or url is not None:
            raise
        _say(f"{error}; starting one")
    log = _start_daemon()
    deadline = time.monotonic() + _START_TIMEOUT_S
    while True:
        await asyncio.sleep(0.05)
        try:
            ws, found = await _open(profile, None, None, None)
        except Unreachable:
            if time.monotonic() > deadline:
                raise Unreachable(
                    f"the daemon did not start within {_START_TIMEOUT_S:g}s (see {log})"
                ) from None
            continue
        _say(_started(found, log))
        return ws


def _started(found: Discovery | None, log: Path) -> str:
    """The one line that says which daemon the shim started (PROTOCOL §18.2)."""
    config = default_config_path()
    named = f"config {config}" if config.is_file() else "the built-in config"
    where = f"pid {found.pid}, {named}, discovery file {found.path}" if found else named
    return f"started a daemon ({where}; its log: {log})"


class _LineTooLong(Exception):
    """A line of stdin beyond :data:`_MAX_LINE`."""


class _Stdin:
    """The lines of stdin, however the client connected it.

    A pipe or a socket (what editors give) is read by the event loop; anything
    else (a file, a terminal, ``/dev/null``: the loop's pipe transport refuses
    them or cannot poll them) by a daemon thread, which never holds up exit.
    """

    def __init__(self) -> None:
        self._reader: asyncio.StreamReader | None = None
        self._lines: asyncio.Queue[bytes | Exception] | None = None

    async def open(self) -> _Stdin:
        loop = asyncio.get_running_loop()
        mode = os.fstat(sys.stdin.fileno()).st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            self._reader = asyncio.StreamReader(limit=_MAX_LINE)
            protocol = asyncio.StreamReaderProtocol(self._reader)
            await loop.connect_read_pipe(lambda: protocol, sys.stdin)
        else:
            self._lines = asyncio.Queue()
            threading.Thread(target=self._read, args=(loop, self._lines), daemon=True).start()
        return self

    @staticmethod
    def _read(loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[bytes | Exception]) -> None:
        stream = sys.stdin.buffer
        while True:
            line: bytes | Exception
            try:
                line = stream.readline(_MAX_LINE + 1)
            except (OSError, ValueError):
                line = b""
            if len(line) > _MAX_LINE:
                line = _LineTooLong()
            try:
                loop.call_soon_threadsafe(lines.put_nowait, line)
            except RuntimeError:  # the loop is gone: the shim is ending
                return
            if not line or isinstance(line, Exception):
                return

    async def readline(self) -> bytes:
        """The next line (with its newline), ``b""`` at the end; :class:`_LineTooLong`."""
        if self._reader is not None:
            try:
                return await self._reader.readline()
            except ValueError:  # the stream's limit: asyncio's LimitOverrunError, wrapped
                raise _LineTooLong() from None
        assert self._lines is not None
        line = await self._lines.get()
        if isinstance(line, Exception):
            raise line
        return line


class _Stdout:
    """stdout, one line per frame, flushed once per event-loop tick.

    The frames that arrived together (a turn's burst of updates) go out in one
    ``write(2)``; none waits beyond the tick it arrived in.  A client gone
    (``BrokenPipeError``) is raised by the next :meth:`write`.
    """

    def __init__(self) -> None:
        self._out = sys.stdout.buffer
        self._loop = asyncio.get_running_loop()
        self._scheduled = False
        self._broken: BrokenPipeError | None = None

    def write(self, line: bytes) -> None:
        self.write_lines(line + b"\n")

    def write_lines(self, lines: bytes) -> None:
        """Write ``lines`` (each already followed by its newline) as they are."""
        if self._broken is not None:
            raise self._broken
        self._out.write(lines)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        try:
            self._out.flush()
        except BrokenPipeError as error:
            self._broken = error

    def flush(self) -> None:
        self._flush()
        if self._broken is not None:
            raise self._broken


def _write(line: bytes) -> None:
    out = sys.stdout.buffer
    out.write(line)
    out.write(b"\n")
    out.flush()


async def _refuse_first_request(reason: Unreachable | Refused) -> None:
    """Answer the client's first request (its ``initialize``) with an error naming ``reason``.

    With the code that says what happened (PROTOCOL §18.3, docs/errors.md):
    -32000 no daemon reachable, -32011 an unknown profile, -32012 a refused
    token; ``data.details`` is the message, which ACP clients show.
    """
    # Imported here: the shim's every other path starts without the rpc package.
    from oma_bridge.wire.codes import FORBIDDEN, NOT_FOUND, UNREACHABLE

    if isinstance(reason, Unreachable):
        code = UNREACHABLE
    else:
        code = NOT_FOUND if reason.status == 404 else FORBIDDEN
    text = f"oma-bridge: {reason}"
    error = {
        "code": code,
        "message": text,
        "data": {"name": reason.name, "details": text},
    }
    stdin = await _Stdin().open()
    with contextlib.suppress(_LineTooLong, BrokenPipeError):
        while line := await stdin.readline():
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and "id" in message and "method" in message:
                _write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error}).encode())
                return


class _Pending:
    """The ids of the client's requests not answered yet, for the end of stdin."""

    def __init__(self) -> None:
        self.ids: set[Any] = set()
        self.none_left = asyncio.Event()
        self.none_left.set()

    def sent(self, line: bytes) -> None:
        if b'"method"' not in line or b'"id"' not in line:
            return  # a notification or an answer: nothing will come back for it
        with contextlib.suppress(ValueError):
            message = json.loads(line)
            if isinstance(message, dict) and "method" in message and "id" in message:
                self.ids.add(_id_key(message["id"]))
                self.none_left.clear()

    def received(self, frame: bytes) -> None:
        # The daemon writes notifications with "method" right after "jsonrpc":
        # the bulk of the frames (a turn's updates) are told apart unparsed.
        if not self.ids or frame.startswith(_NOTIFICATION_PREFIX):
            return
        self._answered(frame)

    def received_lines(self, frame: bytes) -> None:
        """:meth:`received` for a frame of newline-terminated messages (D24)."""
        if not self.ids:
            return
        # Every line a notification (each after the first follows a newline),
        # told in two passes of C over the frame rather than a loop per line.
        if (
            frame.startswith(_NOTIFICATION_PREFIX)
            and frame.count(_NEXT_NOTIFICATION) == frame.count(b"\n") - 1
        ):
            return
        for line in frame.split(b"\n"):
            if line and not line.startswith(_NOTIFICATION_PREFIX):
                self._answered(line)

    def _answered(self, frame: bytes) -> None:
        with contextlib.suppress(ValueError):
            message = json.loads(frame)
            if isinstance(message, dict) and "method" not in message and "id" in message:
                self.ids.discard(_id_key(message["id"]))
                if not self.ids:
                    self.none_left.set()


def _id_key(value: Any) -> tuple[str, Any]:
    return (type(value).__name__, value)  # 1 and "1" are different ids


async def _relay(ws: ClientConnection) -> int:
    stdin = await _Stdin().open()
    pending = _Pending()
    ended_by: list[str] = []

    async def upstream() -> None:
        try:
            while line := await stdin.readline():
                text = line.rstrip(b"\r\n")
                if text.strip():
                    pending.sent(text)
                    await ws.send(text.decode("utf-8", "replace"))
        except _LineTooLong:
            _say(f"a line of stdin is longer than {_MAX_LINE} bytes; closing")
        ended_by.append("stdin")
        # The answers to what was just sent still go out, for a moment: a client
        # that writes a request and closes stdin (a script, a pipe) gets them.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(pending.none_left.wait(), _EOF_GRACE_S)
        await ws.close()  # stdin closed: detach, the sessions stay in the daemon

    async def downstream(up: asyncio.Task[None]) -> None:
        out = _Stdout()
        # Frames of whole lines (D24) are written as they came; an acp.v1
        # frame is one message, which gets its newline.
        lines = ws.subprotocol == ACP_LINES_SUBPROTOCOL
        received = pending.received_lines if lines else pending.received
        write = out.write_lines if lines else out.write
        try:
            while True:
                # The frame's bytes as they came (the daemon's UTF-8 JSON),
                # without a decode and an encode back per line.
                frame = await ws.recv(decode=False)
                received(frame)
                write(frame)
        except ConnectionClosed:
            out.flush()
        except BrokenPipeError:  # the client stopped reading our stdout: it is gone
            ended_by.append("stdout")
            up.cancel()
            await ws.close()
            return
        if not ended_by:
            ended_by.append("daemon")
            up.cancel()  # nothing more can be sent

    # asyncio's own task group: the shim does without anyio to start faster.
    async with asyncio.TaskGroup() as tasks:
        up = tasks.create_task(upstream())
        tasks.create_task(downstream(up))
    if ended_by[:1] == ["daemon"]:
        _say(f"the daemon closed the connection ({ws.close_code} {ws.close_reason})")
        return 1
    return 0


async def _main(args: Any) -> int:
    try:
        ws = await _connect(args.profile, args)
    except (Unreachable, Refused) as error:
        _say(str(error))
        await _refuse_first_request(error)
        return error.exit_status
    except OSError as error:  # --token-file that cannot be read
        _say(str(error))
        return 2
    async with ws:
        return await _relay(ws)


def main(args: Any) -> int:
    """Run the shim for the parsed ``oma-bridge acp`` arguments."""
    if os.environ.get("OMA_BRIDGE_SHIM_DEBUG"):
        _say(f"profile {args.profile}")
    try:
        loop = resolve_event_loop(args.event_loop)
    except EventLoopError as error:
        _say(f"--event-loop: {error}")
        return 2
    try:
        with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
            return runner.run(_main(args))
    except KeyboardInterrupt:
        return 130
