"""A remote ACP agent over a WebSocket: the second ``AgentTransport`` (``transport.py``).

PROTOCOL §21: the daemon is an ACP client of ``wss://HOST:PORT/acp/<profile>``
(another oma-bridge) or of any server of ACP's WebSocket transport (the
RFD "Streamable HTTP & WebSocket Transport": one JSON-RPC message per text
frame).  The session, its states and its turns are the same as for a child
over stdio; this module is only how the messages travel and how the
connection is made, kept alive and told apart from a failure.

* **Handshake.** The subprotocol ``acp.v1`` is offered; the token goes as
  ``Authorization: Bearer`` (every oma-bridge accepts it on ``/acp``, and it
  is what a server that is not ours understands; the auth subprotocol of
  §2 is for browsers, which cannot set a header).  A ``wss://`` URL is
  verified against ``ca_file`` (else the system's CAs) and must name the
  host; compression is off, as on the daemon's own listeners.
* **Alive.** The websockets library answers the remote's pings and sends
  its own from the event loop, also between runs when nobody reads: a
  remote that answers none for ``send_timeout_s`` is closed (1011), and the
  next read or send says so.  A connection's end (closed by the remote, cut
  on the way, timed out) ends the transport, and the session crashes the
  turn in flight with the reason; the backend connects again at the next
  run and continues the session (``session/resume``, else ``session/load``,
  else a new one with a note, ``handshake.py``).
* **Connecting.** :class:`WebSocketConnector` makes each connection.  A
  failure the user must mend (the token refused, a certificate that cannot
  be verified or names another host, no agent at that path) fails at once,
  in one line naming the cause.  A failure that passes (refused or reset
  TCP, a timeout, 502/503/504 of a daemon that is starting or stopping) is
  retried with backoff, but only once the agent had a session to continue:
  a first connection to a wrong address says so at once.

What is cancel-safe: ``receive`` (a cancelled ``recv`` loses nothing, as the
websockets library documents), and the connection attempts (a cancelled
attempt closes its socket).
"""

from __future__ import annotations

import contextlib
import logging
import ssl
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.protocol import State

from oma_bridge._version import __version__
from oma_bridge.backends.acp.credentials import (
    CredentialError,
    read_token_file,
    remote_ssl_context,
)
from oma_bridge.backends.acp.stdio import DEFAULT_MAX_BAD_LINES, TooManyBadLinesError
from oma_bridge.backends.acp.transport import BeforeWait
from oma_bridge.errors import BackendError
from oma_bridge.redaction import add_secrets, redact

__all__ = ["ACP_SUBPROTOCOL", "WebSocketAgent", "WebSocketConnector"]

logger = logging.getLogger(__name__)

#: The subprotocol of ACP's WebSocket transport.
ACP_SUBPROTOCOL = "acp.v1"
#: The first wait between two connection attempts; it doubles up to :data:`_MAX_BACKOFF_S`.
_FIRST_BACKOFF_S = 0.25
_MAX_BACKOFF_S = 4.0
#: Statuses of a daemon that is starting, stopping or behind a proxy that lost it.
_PASSING_STATUSES = frozenset({502, 503, 504})


class WebSocketAgent:
    """One connection to a remote ACP agent (see the module docstring)."""

    def __init__(
        self, ws: ClientConnection, url: str, *, max_bad_frames: int, keepalive_s: float
    ) -> None:
        self._ws = ws
        self._url = url
        self._max_bad = max_bad_frames
        self._bad_in_a_row = 0
        self._before_wait: BeforeWait | None = None
        self._keepalive_s = keepalive_s

    @property
    def pid(self) -> int | None:
        return None  # nothing of it runs here

    @property
    def gone(self) -> bool:
        """The connection closed (the remote went, or the keepalive gave up on it)."""
        return self._ws.state is State.CLOSED

    def set_before_wait(self, hook: BeforeWait | None) -> None:
        self._before_wait = hook

    async def send(self, data: bytes) -> None:
        """One message as one text frame (``data`` is UTF-8 JSON)."""
        try:
            await self._ws.send(data, text=True)
        except ConnectionClosed as exc:
            raise anyio.BrokenResourceError(f"the connection closed ({_closed(exc)})") from None

    async def receive(self) -> object | None:
        while True:
            try:
                frame = await self._next_frame()
            except ConnectionClosed:
                return None
            try:
                message = orjson.loads(frame)
            except orjson.JSONDecodeError:
                message = None
            if isinstance(message, dict | list):
                self._bad_in_a_row = 0
                return message
            self._bad_in_a_row += 1
            logger.warning(
                "remote ACP agent %s: skipped a frame that is not a JSON-RPC message: %.200s",
                self._url,
                redact(frame.decode("utf-8", errors="replace")),
            )
            if self._bad_in_a_row >= self._max_bad:
                raise TooManyBadLinesError(
                    f"remote ACP agent sent {self._bad_in_a_row} frames in a row that are "
                    "not JSON-RPC messages"
                )

    async def _next_frame(self) -> bytes:
        """The next frame; ``before_wait`` is awaited first when none is here yet.

        A ``recv`` in a scope cancelled before it starts returns a frame
        already received without waiting, and loses nothing when there is
        none (its cancellation is safe): so only a read that would wait
        flushes the text the session holds back.
        """
        if self._before_wait is not None:
            with anyio.CancelScope() as scope:
                scope.cancel()
                return await self._ws.recv(decode=False)
            await self._before_wait()
        return await self._ws.recv(decode=False)

    def describe_end(self) -> str:
        """``lost its connection to URL (why)``, for the session's message."""
        return (
            f"lost its connection to {self._url} ({self._why_closed()}); the next run "
            "connects again and continues the session"
        )

    def _why_closed(self) -> str:
        protocol = self._ws.protocol
        received, sent = protocol.close_rcvd, protocol.close_sent
        if received is not None:
            code, reason = received.code, received.reason
            return (
                f"closed by the remote: {code}, {redact(reason)}"
                if reason
                else f"closed by the remote: {code}"
            )
        if sent is not None and sent.code == 1011:
            return (
                f"no answer to a ping: the remote stopped answering for {self._keepalive_s:.0f} s"
            )
        if self._ws.state is not State.CLOSED:
            return "still open"
        return "1006, no close frame: the connection was cut"

    def diagnostics(self) -> str:
        return ""  # a remote agent says nothing outside the protocol to us

    async def wait_gone(self, seconds: float) -> None:
        with anyio.move_on_after(seconds):
            await self._ws.wait_closed()

    async def close(self, grace_s: float) -> None:
        """The closing handshake, at most ``grace_s`` + 2 s; the socket is gone after it.

        The remote session is left as it is (an oma-bridge keeps it, detached,
        for a later ``session/resume``); ending it is ``session/close``'s job.
        """
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(grace_s + 2):
                await self._ws.close()
            if self._ws.state is not State.CLOSED:
                self._ws.transport.abort()


def _closed(exc: ConnectionClosed) -> str:
    frame = exc.rcvd or exc.sent
    if frame is None:
        return "no close frame"
    return f"{frame.code}, {redact(frame.reason)}" if frame.reason else str(frame.code)


class _Failed(Exception):
    """One connection attempt failed: why, and whether a retry may mend it."""

    def __init__(self, cause: str, *, passing: bool) -> None:
        super().__init__(cause)
        self.cause = cause
        self.passing = passing


@dataclass
class WebSocketConnector:
    """Makes the connections of one remote agent: the backend's ``connect`` (see the module
    docstring for what is retried)."""

    url: str
    label: str
    token_file: Path | None
    ca_file: Path | None
    #: The keepalive and the retry budget (the daemon's ``send_timeout_s``).
    send_timeout_s: float
    max_message_bytes: int
    #: Retry what passes: set once a connection was made, or from the start when the
    #: agent continues a session (one brought back after a restart).
    retry: bool = False
    max_bad_frames: int = DEFAULT_MAX_BAD_LINES
    #: Connections made, for the logs and the tests.
    connections: int = field(default=0, init=False)

    async def __call__(self) -> WebSocketAgent:
        """A new connection; a ``BackendError`` saying why there is none."""
        deadline = time.monotonic() + self.send_timeout_s
        backoff = _FIRST_BACKOFF_S
        attempts = 0
        while True:
            attempts += 1
            try:
                ws = await self._attempt()
            except _Failed as failed:
                message = f'ACP agent "{self.label}" cannot connect to {self.url}: {failed.cause}'
                left = deadline - time.monotonic()
                if failed.passing and self.retry and left > backoff:
                    logger.info("%s; trying again in %.2f s", message, backoff)
                    await anyio.sleep(backoff)
                    backoff = min(backoff * 2, _MAX_BACKOFF_S)
                    continue
                if attempts > 1:
                    message += f" ({attempts} attempts in {self.send_timeout_s - left:.0f} s)"
                raise BackendError(message) from None
            self.connections += 1
            self.retry = True
            if attempts > 1:
                logger.info(
                    'ACP agent "%s": connected to %s after %d attempts',
                    self.label,
                    self.url,
                    attempts,
                )
            return WebSocketAgent(
                ws,
                self.url,
                max_bad_frames=self.max_bad_frames,
                keepalive_s=self.send_timeout_s * 2 / 3,
            )

    async def _attempt(self) -> ClientConnection:
        headers = {}
        try:
            if self.token_file is not None:
                token = read_token_file(self.token_file)
                add_secrets(values=[token])  # blanked wherever it would appear
                headers["Authorization"] = f"Bearer {token}"
            context = remote_ssl_context(self.ca_file) if _secure(self.url) else None
        except CredentialError as exc:
            raise _Failed(str(exc), passing=False) from None
        # A ping every third of the send timeout, answered within another
        # third, the closing handshake a sixth: a remote that stopped
        # answering is found within the send timeout, busy or idle.
        third = self.send_timeout_s / 3
        try:
            return await connect(
                self.url,
                additional_headers=headers,
                subprotocols=[ACP_SUBPROTOCOL],  # type: ignore[list-item]
                ssl=context,
                compression=None,
                max_size=self.max_message_bytes,
                open_timeout=self.send_timeout_s,
                ping_interval=third,
                ping_timeout=third,
                close_timeout=third / 2,
                user_agent_header=f"oma-bridge/{__version__}",
            )
        except InvalidStatus as exc:
            raise self._refused(exc.response.status_code) from None
        except ssl.SSLEOFError:  # closed during the TLS handshake: one that is going away
            raise _Failed("the connection closed during the TLS handshake", passing=True) from None
        except ssl.SSLCertVerificationError as exc:
            raise _Failed(self._unverified(exc), passing=False) from None
        except ssl.SSLError as exc:  # before OSError, which it is
            cause = f"the TLS handshake failed: {exc.reason or exc} (is it a ws:// listener?)"
            raise _Failed(cause, passing=False) from None
        except TimeoutError:
            raise _Failed(f"no answer within {self.send_timeout_s:g} s", passing=True) from None
        except OSError as exc:
            raise _Failed(exc.strerror or str(exc), passing=True) from None
        except (InvalidHandshake, ConnectionClosed) as exc:
            raise _Failed(f"the WebSocket handshake failed: {exc}", passing=True) from None

    def _unverified(self, exc: ssl.SSLCertVerificationError) -> str:
        host = urlsplit(self.url).hostname
        detail = exc.verify_message or exc.reason or str(exc)
        if "hostname mismatch" in detail.lower() or "ip address mismatch" in detail.lower():
            return (
                f"the remote's TLS certificate does not name {host} ({detail}); "
                "connect by a name the certificate holds"
            )
        where = f"the CA in {self.ca_file}" if self.ca_file else "the system's CAs"
        return (
            f"cannot verify the remote's TLS certificate by {where}: {detail}; "
            "name the CA that signed it in ca_file"
        )

    def _refused(self, status: int) -> _Failed:
        phrase = f"HTTP {status}"
        with contextlib.suppress(ValueError):
            phrase += f" {HTTPStatus(status).phrase}"
        if status in _PASSING_STATUSES:
            return _Failed(f"the remote answered {phrase}", passing=True)
        why = {
            401: "the remote refused the token: check token_file",
            403: "the remote refused the request: an oma-bridge names its host in "
            "allowed_hosts and takes no Origin it does not know",
            404: f"the remote has no agent at {urlsplit(self.url).path or '/'}",
        }.get(status, "the remote refused the WebSocket upgrade")
        return _Failed(f"{why} ({phrase})", passing=False)


def _secure(url: str) -> bool:
    return url[:6].lower() == "wss://"
