"""One WebSocket connection: frames in and out, the ``initialize`` gate, dispatch.

Frames go through the transport-free JSON-RPC core (:mod:`oma_bridge.rpc`)
via its :class:`~oma_bridge.rpc.Peer`, which answers malformed envelopes
itself (-32700 not JSON, -32600 not a request), runs every request in its
own task (so requests may be pipelined and answered in any order) and
matches the client's answers to the daemon's own requests.

On top of it, :class:`Gateway` enforces the lifecycle of docs/contract.md §3: the
first request must be ``initialize`` (anything else gets -32002 and the
connection stays open, for ``send_timeout_s`` at most: a connection that
has not initialized by then is closed with 1008), a second ``initialize``
gets -32600, an unsupported ``protocolVersion`` gets -32003 with
``{"supported": [1]}``.  Then it looks methods up in the
:class:`~oma_bridge.server.methods.MethodRegistry`.

When the socket closes, every request still being served is cancelled (a run
started by this connection ends) and the session's close callbacks run.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from oma_bridge._version import __version__
from oma_bridge.errors import WireError
from oma_bridge.rpc import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    ConnectionClosedError,
    Event,
    Peer,
)
from oma_bridge.rpc.peer import NOT_NOW, QuickLane
from oma_bridge.server.auth import ListenerKind, acp_target
from oma_bridge.server.config import ServerConfig
from oma_bridge.server.frames import FrameConnection, FrameWriter
from oma_bridge.server.methods import MethodRegistry
from oma_bridge.server.profiles import agent_profile_infos
from oma_bridge.server.session import Session
from oma_bridge.wire.codes import NOT_INITIALIZED, OVERLOADED, PROTOCOL_VERSION, UNSUPPORTED_VERSION
from oma_bridge.wire.params import InitializeParams, parse_params

__all__ = ["SUPPORTED_PROTOCOL_VERSIONS", "AcpEndpoints", "Endpoint", "Gateway"]

logger = logging.getLogger("oma_bridge.server")

SUPPORTED_PROTOCOL_VERSIONS = (PROTOCOL_VERSION,)


@dataclass(frozen=True)
class Endpoint:
    """What one kind of connection serves: its methods and its JSON-RPC dialect."""

    prefix: str
    on_request: Callable[[Session, str, Any], Awaitable[Any]]
    on_notification: Callable[[Session, str, Any], Awaitable[None]]
    #: The parameter of ``$/cancel_request``: ``id`` here, ``requestId`` in ACP.
    cancel_param: str
    inline: frozenset[str] = frozenset()
    #: Read-only methods answered from the frame's callback when nothing
    #: has to wait (D25), and how: ``(session, method, params)`` -> the
    #: result or ``NOT_NOW``.
    quick: frozenset[str] = frozenset()
    answer_now: Callable[[Session, str, Any], Any] | None = None


class AcpEndpoints(Protocol):
    """The ACP facade as the gateway sees it."""

    def endpoint(self, profile: str) -> Endpoint: ...


async def _ignore_notification(session: Session, method: str, params: Any) -> None:
    logger.debug("connection %s: ignored notification %s", session.id, method)


#: errno values that mean the daemon is out of a resource for now.
_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN})
RETRY_AFTER_MS = 1000


class Gateway:
    """Serves the connections of every listener of one daemon."""

    def __init__(self, config: ServerConfig, methods: MethodRegistry) -> None:
        self.config = config
        self.methods = methods
        #: What each acp profile's agent can do, by profile (the daemon's agents say it).
        self.capabilities: Callable[[], Mapping[str, Mapping[str, Any]]] = dict
        self.sessions: set[Session] = set()
        self._ids = itertools.count(1)
        #: Serves ``/acp`` and ``/acp/<profile>`` (the ACP facade), when set.
        self.acp: AcpEndpoints | None = None

    def reload(self, config: ServerConfig) -> None:
        """Serve ``config``'s profiles from now on (``initialize``, ``agents/list``).

        Connections already open keep their settings; the daemon applies a
        reload to every part in one step (:mod:`oma_bridge.server.daemon`).
        """
        self.config = config

    def profile_infos(self) -> list[dict[str, Any]]:
        """``agents/list`` and ``initialize``'s profiles: the config's, with what their agents
        said they can do (PROTOCOL §22.2)."""
        return agent_profile_infos(self.config.agents, self.capabilities())

    def handler(self, listener: ListenerKind) -> Callable[[ServerConnection], Awaitable[None]]:
        """The websockets connection handler for one listener: this protocol, or ACP."""

        async def handle(ws: ServerConnection) -> None:
            target = acp_target(ws.request.path if ws.request is not None else "/")
            if target is not None and self.acp is not None:
                await self.serve_connection(ws, listener, self.acp.endpoint(target))
            else:
                await self.serve_connection(ws, listener, self._endpoint)

        return handle

    async def serve_connection(
        self, ws: ServerConnection, listener: ListenerKind, endpoint: Endpoint
    ) -> None:
        """One connection: frames to and from a :class:`Peer`, the send watchdog, the session."""
        session_id = f"{endpoint.prefix}{next(self._ids)}"
        send_timeout = self.config.server.send_timeout_s

        async def receive() -> str | None:
            try:
                frame = await ws.recv()
            except ConnectionClosed:
                return None
            if isinstance(frame, bytes):
                logger.info("connection %s sent a binary frame; closing it (1003)", session_id)
                writer.flush()  # what was sent before goes out before the close
                await ws.close(CloseCode.UNSUPPORTED_DATA, "binary frames are not supported")
                return None
            return frame

        # Sends are one at a time (the peer's lock), so one clock says how long
        # the send in progress has been blocked; a watchdog per connection
        # reads it, which costs far less than a deadline armed for every frame.
        # The same watchdog closes a connection that never sends ``initialize``.
        writer = FrameWriter(ws)
        stopped_reading = False

        async def send(data: bytes, *, hold: bool = False) -> None:
            try:
                await writer.send(data, hold=hold)
            except ConnectionClosed:
                if stopped_reading:
                    raise ConnectionClosedError("the client stopped reading") from None
                raise

        async def send_notification(data: bytes) -> None:
            await send(data, hold=True)

        opened = time.monotonic()

        async def watch() -> None:
            nonlocal stopped_reading
            interval = min(1.0, send_timeout / 4)
            while True:
                await anyio.sleep(interval)
                if not session.initialized and time.monotonic() - opened > send_timeout:
                    # Authenticated but silent: it must not hold one of the
                    # max_connections slots for ever.
                    logger.info(
                        "connection %s sent no initialize within %gs; closing it (1008)",
                        session_id,
                        send_timeout,
                    )
                    await ws.close(CloseCode.POLICY_VIOLATION, "no initialize in time")
                    return
                since = writer.blocked_since
                if since is not None and time.monotonic() - since > send_timeout:
                    # A client that stops reading must not hold the daemon's memory.
                    logger.warning("connection %s stopped reading; dropping it", session_id)
                    stopped_reading = True
                    ws.transport.abort()
                    return

        async def on_request(method: str, params: Any) -> Any:
            return await endpoint.on_request(session, method, params)

        async def on_notification(method: str, params: Any) -> None:
            await endpoint.on_notification(session, method, params)

        def on_invalid(event: Event) -> None:
            logger.debug("connection %s: %s message: %s", session_id, event.kind, event.detail)

        quick = None
        if endpoint.answer_now is not None and endpoint.quick:
            answer_now = endpoint.answer_now

            def answer(method: str, params: Any) -> Any:
                return answer_now(session, method, params)

            quick = QuickLane(endpoint.quick, answer, writer.answer_now)
        peer = Peer(
            send,
            receive,
            on_request=on_request,
            on_notification=on_notification,
            on_invalid=on_invalid,
            cancel_param=endpoint.cancel_param,
            inline_methods=endpoint.inline,
            send_notification=send_notification,
            offer_notification=writer.offer,
            quick=quick,
        )
        session = Session(session_id, listener, peer, drop=ws.transport.abort)
        self.sessions.add(session)
        logger.info("connection %s opened on the %s listener", session_id, listener)
        try:
            async with peer, anyio.create_task_group() as tasks:
                tasks.start_soon(watch)
                session.task_group = tasks
                if quick is not None and isinstance(ws, FrameConnection):
                    ws.quick = peer.serve_now
                await peer.closed.wait()
                tasks.cancel_scope.cancel()
        finally:
            if isinstance(ws, FrameConnection):
                ws.quick = None  # the connection must not keep its peer (PROTOCOL §23)
            writer.detach()  # the last tick's frames, before websockets closes the socket
            self.sessions.discard(session)
            session.close()
            logger.info("connection %s closed", session_id)

    @property
    def _endpoint(self) -> Endpoint:
        return Endpoint(
            prefix="c",
            on_request=self._dispatch,
            on_notification=_ignore_notification,
            cancel_param="id",
            inline=frozenset({"initialize", *self.methods.inline}),
            quick=self.methods.quick,
            answer_now=self._answer_now,
        )

    def _answer_now(self, session: Session, method: str, params: Any) -> Any:
        """A quick method's answer from the frame's callback (D25), or ``NOT_NOW``.

        Before ``initialize`` it is ``NOT_NOW``: the reader's dispatch gives
        the -32002 and its logging, as for every method.
        """
        handler = self.methods.get_now(method)
        if handler is None or not session.initialized:
            return NOT_NOW
        return handler(session, params)

    async def _dispatch(self, session: Session, method: str, params: Any) -> Any:
        if method == "initialize":
            # No await before the session is marked initialized: a request
            # pipelined right behind initialize must find the gate open.
            return self._initialize(session, params)
        if not session.initialized:
            raise WireError(NOT_INITIALIZED, "Not initialized")
        handler = self.methods.get(method)
        if handler is None:
            raise WireError(METHOD_NOT_FOUND, f"Method not found: {method}")
        try:
            return await handler(session, params)
        except WireError:
            raise
        except OSError as error:
            if error.errno not in _EXHAUSTED:
                logger.exception("connection %s: %s failed", session.id, method)
                raise WireError(INTERNAL_ERROR, "Internal error") from None
            # Out of file descriptors or memory: not a bug, and it passes; say so.
            reason = os.strerror(error.errno)
            logger.warning("connection %s: %s refused: %s", session.id, method, reason)
            raise WireError(
                OVERLOADED, f"Overloaded: {reason}", {"retryAfterMs": RETRY_AFTER_MS}
            ) from None
        except Exception:
            logger.exception("connection %s: %s failed", session.id, method)
            raise WireError(INTERNAL_ERROR, "Internal error") from None

    def _initialize(self, session: Session, params: Any) -> dict[str, Any]:
        if session.initialized:
            raise WireError(INVALID_REQUEST, "Invalid Request: already initialized")
        # The version is checked before the rest of the shape: a client of a
        # later protocol may send params this version does not know.
        version = params.get("protocolVersion") if isinstance(params, dict) else None
        if (
            isinstance(version, int)
            and not isinstance(version, bool)
            and version not in SUPPORTED_PROTOCOL_VERSIONS
        ):
            raise WireError(
                UNSUPPORTED_VERSION,
                "Unsupported protocol version",
                {"supported": list(SUPPORTED_PROTOCOL_VERSIONS)},
            )
        session.init = parse_params(InitializeParams, params)
        client = session.init.clientInfo
        logger.info("connection %s initialized by %r %r", session.id, client.name, client.version)
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "serverInfo": {"name": "oma-bridge", "version": __version__},
            "agents": self.profile_infos(),
        }
