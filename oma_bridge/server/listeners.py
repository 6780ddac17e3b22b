"""The daemon's listeners: a unix socket and an optional TCP port, both WebSocket servers.

Both run the same :class:`~oma_bridge.server.auth.RequestPolicy` in
``process_request`` (before the upgrade) and share one
:class:`ConnectionSlots`, so that ``max_connections`` counts every listener
together from the upgrade on, and one :class:`LiveConnections`, which a stop
closes before the listening sockets.  The websockets options are fixed here:
compression off, ``max_size`` = ``max_message_bytes`` (a larger frame closes
that connection with 1009), keepalive pings on, no ``Server`` header.  With
a TLS context the TCP listener is ``wss://``; a client that does not speak
TLS fails in the TLS layer, before websockets or the policy see a byte.

The runtime folder (the socket's folder, also home of the discovery file) is
guarded by a lock file held for the daemon's life: a second daemon on the
same folder is refused with a clear error.  A socket file left by a dead
daemon is replaced; one that still answers is refused.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import socket
import ssl
import stat
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any

import anyio
from websockets.asyncio.server import Server, ServerConnection, serve, unix_serve
from websockets.frames import CloseCode
from websockets.http11 import Request, Response
from websockets.protocol import State
from websockets.typing import Subprotocol

from oma_bridge.paths import LOCK_NAME
from oma_bridge.private_files import NOT_SHARED, NotPrivateError, make_private_folder, open_private
from oma_bridge.server.auth import Answer, ListenerKind, RequestPolicy, select_subprotocol
from oma_bridge.server.config import TcpEndpoint
from oma_bridge.server.frames import FrameConnection

__all__ = [
    "KEEPALIVE_INTERVAL_S",
    "TLS_HANDSHAKE_TIMEOUT_S",
    "ConnectionSlots",
    "Listener",
    "LiveConnections",
    "StartupError",
    "hold_runtime_dir",
    "open_tcp_listener",
    "open_unix_listener",
]

#: The listen backlog of every listener: a burst of clients connecting at
#: once (an editor's restart, a load test) waits to be accepted, not refused.
LISTEN_BACKLOG = 4096

logger = logging.getLogger("oma_bridge.server")
#: websockets' own logger.  Pinned at INFO: its DEBUG output dumps request
#: headers, and with them the token.
wire_logger = logging.getLogger("oma_bridge.server.wire")
wire_logger.setLevel(logging.INFO)

KEEPALIVE_INTERVAL_S = 20.0
#: asyncio's default is 60 s: a client that stalls in the TLS handshake
#: would hold a socket three times longer than one stalling in the HTTP one.
TLS_HANDSHAKE_TIMEOUT_S = 10.0

ConnectionHandler = Callable[[ServerConnection], Awaitable[None]]


class StartupError(Exception):
    """The daemon cannot start (a listener, the runtime folder, the discovery file)."""


class ConnectionSlots:
    """The connections counted against ``max_connections``, across every listener.

    A slot is taken in ``process_request`` once a request passed every check,
    and given back when the connection's handler ends or its handshake fails.
    Closed connections are pruned before counting, so that a handshake that
    died between the two can never leak a slot.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: set[ServerConnection] = set()

    def take(self, connection: ServerConnection) -> bool:
        self._held = {c for c in self._held if c.protocol.state is not State.CLOSED}
        if len(self._held) >= self.limit:
            return False
        self._held.add(connection)
        return True

    def release(self, connection: ServerConnection) -> None:
        self._held.discard(connection)

    def __len__(self) -> int:
        return len(self._held)


class LiveConnections:
    """The upgraded connections whose handlers still run, across every listener.

    A stop closes them (1001) and waits for their handlers, in which the runs
    they started end, while the listening sockets stay open, so that
    ``/healthz`` and ``/readyz`` keep answering during the drain; websockets
    offers that wait only together with closing the listening sockets.
    """

    def __init__(self) -> None:
        self._live: set[ServerConnection] = set()
        self._idle = anyio.Event()
        self._idle.set()
        self._closing = False

    def track(self, handler: ConnectionHandler) -> ConnectionHandler:
        """``handler``, counted from its start to its end."""

        async def run(connection: ServerConnection) -> None:
            if self._closing:  # upgraded just before the stop, started just after
                await connection.close(CloseCode.GOING_AWAY)
                return
            if not self._live:
                self._idle = anyio.Event()
            self._live.add(connection)
            try:
                await handler(connection)
            finally:
                self._live.discard(connection)
                if not self._live:
                    self._idle.set()

        return run

    async def close(self) -> None:
        """Close every connection (1001); return once every handler has ended."""
        self._closing = True
        async with anyio.create_task_group() as tg:
            for connection in list(self._live):
                tg.start_soon(connection.close, CloseCode.GOING_AWAY)
        await self._idle.wait()


@dataclass(frozen=True, slots=True)
class Listener:
    """One bound listener: its websockets server and where it listens."""

    kind: ListenerKind
    server: Server
    #: The socket path (unix) or ``None``.
    path: Path | None = None
    #: The bound port (TCP) or ``None``.
    port: int | None = None
    #: The URL clients use (TCP) or ``None``.
    url: str | None = None


@contextlib.contextmanager
def hold_runtime_dir(folder: Path, *, own: bool) -> Iterator[None]:
    """Create ``folder`` (0700), and hold its lock file for the daemon's life.

    An ``own`` folder (the default runtime folder) that exists must be the
    user's and 0700, else the daemon refuses to start with a line that says
    how to fix it; a folder the user named (``socket = "/path"``) must be
    the user's, and keeps its mode.
    """
    try:
        make_private_folder(folder, forbidden=NOT_SHARED if own else 0)
    except NotPrivateError as exc:
        raise StartupError(f"cannot use the runtime folder: {exc}") from None
    except OSError as exc:
        raise StartupError(f"cannot create the runtime folder {folder}: {exc.strerror}") from None
    lock_path = folder / LOCK_NAME
    fd = open_private(lock_path, os.O_RDWR | os.O_NOFOLLOW)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
            raise StartupError(
                f"another oma-bridge daemon (pid {holder}) is running with {folder}"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:  # a full disk, say: one clear line, not a traceback
            raise StartupError(f"cannot write the lock file {lock_path}: {exc.strerror}") from None
        yield
    finally:
        os.close(fd)  # also releases the lock


def _socket_is_live(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def _clear_socket_path(path: Path) -> None:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise StartupError(f"{path} exists and is not a socket; refusing to replace it")
    if _socket_is_live(path):
        raise StartupError(f"a daemon is already listening on {path}")
    logger.info("replacing the stale socket %s", path)
    path.unlink(missing_ok=True)


def _process_request(
    policy: RequestPolicy, kind: ListenerKind, slots: ConnectionSlots
) -> Callable[[ServerConnection, Request], Response | None]:
    def process_request(connection: ServerConnection, request: Request) -> Response | None:
        port = connection.local_address[1] if kind == "tcp" else None
        answer = policy.check(request.path, request.headers, kind, port, request.method)
        if answer is None and not slots.take(connection):
            answer = Answer.refuse(HTTPStatus.SERVICE_UNAVAILABLE, "connection limit reached")
        if answer is None:
            return None
        if answer.status != HTTPStatus.OK:
            logger.info("refused a %s request: %d %s", kind, answer.status.value, answer.reason)
        response = connection.respond(answer.status, answer.body)
        for name, value in answer.headers:
            if name in response.headers:
                del response.headers[name]
            response.headers[name] = value
        if answer.status == HTTPStatus.UNAUTHORIZED:
            response.headers["WWW-Authenticate"] = "Bearer"
        return response

    return process_request


def _server_options(
    policy: RequestPolicy,
    kind: ListenerKind,
    slots: ConnectionSlots,
    max_message_bytes: int,
) -> dict[str, Any]:
    def process_response(
        connection: ServerConnection, request: Request, response: Response
    ) -> None:
        if response.status_code != HTTPStatus.SWITCHING_PROTOCOLS:
            slots.release(connection)

    def choose(connection: ServerConnection, offered: Any) -> Subprotocol | None:
        path = connection.request.path if connection.request is not None else "/"
        chosen = select_subprotocol(tuple(offered), path)
        return Subprotocol(chosen) if chosen is not None else None

    return {
        "process_request": _process_request(policy, kind, slots),
        "process_response": process_response,
        "select_subprotocol": choose,
        "compression": None,  # FrameWriter builds plain frames (server/frames.py)
        "create_connection": FrameConnection,
        "max_size": max_message_bytes,
        "ping_interval": KEEPALIVE_INTERVAL_S,
        "ping_timeout": KEEPALIVE_INTERVAL_S,
        "server_header": None,
        "logger": wire_logger,
        # asyncio's default of 100 lost the 101st of a burst of connects to
        # the unix socket (its client read an end of file in place of the
        # handshake's answer); the kernel caps this at net.core.somaxconn.
        "backlog": LISTEN_BACKLOG,
    }


def _tracked(
    handler: ConnectionHandler, slots: ConnectionSlots, live: LiveConnections
) -> ConnectionHandler:
    counted = live.track(handler)

    async def run(connection: ServerConnection) -> None:
        try:
            await counted(connection)
        finally:
            slots.release(connection)

    return run


async def open_unix_listener(
    path: Path,
    handler: ConnectionHandler,
    *,
    policy: RequestPolicy,
    slots: ConnectionSlots,
    live: LiveConnections,
    max_message_bytes: int,
) -> Listener:
    """Bind the unix socket at ``path`` (mode 0600), replacing a stale one."""
    await anyio.to_thread.run_sync(_clear_socket_path, path)
    options = _server_options(policy, "unix", slots, max_message_bytes)
    try:
        server = await unix_serve(_tracked(handler, slots, live), str(path), **options)
    except OSError as exc:
        raise StartupError(f"cannot listen on {path}: {exc.strerror or exc}") from None
    # The folder is 0700, which guards the moment between bind and chmod.
    os.chmod(path, 0o600)  # noqa: PTH101 - one fast syscall, not worth a thread
    return Listener("unix", server, path=path)


async def open_tcp_listener(
    endpoint: TcpEndpoint,
    handler: ConnectionHandler,
    *,
    policy: RequestPolicy,
    slots: ConnectionSlots,
    live: LiveConnections,
    max_message_bytes: int,
    ssl_context: ssl.SSLContext | None = None,
    port_retries: int = 0,
) -> Listener:
    """Bind the TCP listener (port 0 picks a free port; the bound one is reported).

    With ``ssl_context`` it speaks TLS and its URL is ``wss://``.  A port in
    use is followed by the next one, up to ``port_retries`` more
    (``[server] tcp_port_retries``); any other error, or the last port in
    use, is a :class:`StartupError`.
    """
    options = _server_options(policy, "tcp", slots, max_message_bytes)
    if ssl_context is not None:
        options |= {"ssl": ssl_context, "ssl_handshake_timeout": TLS_HANDSHAKE_TIMEOUT_S}
    handler = _tracked(handler, slots, live)
    last = min(endpoint.port + port_retries, 65535) if endpoint.port else 0
    for port in range(endpoint.port, last + 1):
        try:
            server = await serve(handler, endpoint.host, port, **options)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE and port < last:
                continue
            tried = f"{endpoint.port}-{port}" if port != endpoint.port else f"{port}"
            raise StartupError(
                f"cannot listen on {endpoint.host}:{tried}: {exc.strerror or exc}"
            ) from None
        if port != endpoint.port:
            logger.info("port %d is in use; listening on %d instead", endpoint.port, port)
        break
    bound = server.sockets[0].getsockname()
    host = "127.0.0.1" if endpoint.host in ("0.0.0.0", "localhost") else str(bound[0])
    if host == "::":
        host = "::1"
    shown = f"[{host}]" if ":" in host else host
    scheme = "ws" if ssl_context is None else "wss"
    return Listener("tcp", server, port=int(bound[1]), url=f"{scheme}://{shown}:{bound[1]}/")
