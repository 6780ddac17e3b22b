"""The listeners and their lifecycle: :func:`serve` (the daemon's entry point,
:func:`~oma_bridge.server.daemon.run_daemon`, runs it with the agent methods).

Start-up, in order: load the TLS pair (``tls_cert``/``tls_key``) and refuse
a listener beyond this machine without it, read the token (``token_file`` or
a fresh one), take the runtime folder (0700, lock file), bind every
listener, and only then write the discovery file and report readiness
(``GET /readyz``: ``ready``).  Shutdown (:meth:`RunningServer.stop`,
SIGTERM/SIGINT with ``handle_signals``, or cancelling the caller's scope):
``/readyz`` says ``stopping`` at once; remove the discovery file, close every
connection (1001, which cancels the runs they started) and wait at most
``stop_grace_s`` + 1 s for their handlers, await the caller's ``drain``, and
only then close the listening sockets, remove the socket file and release
the folder.  Until that last step ``/healthz`` and ``/readyz`` keep
answering, so that an orchestrator sees the stop while it drains.

Usage from a task group (tests, the CLI)::

    async with anyio.create_task_group() as tg:
        running = await tg.start(serve, config)
        ...                      # running.url, running.socket_path, running.token
        running.stop()           # serve() returns after a clean shutdown
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from oma_bridge.paths import default_runtime_dir
from oma_bridge.redaction import holding_secret
from oma_bridge.server.auth import RequestPolicy, load_token
from oma_bridge.server.config import ServerConfig
from oma_bridge.server.discovery import remove_discovery, write_discovery
from oma_bridge.server.gateway import AcpEndpoints, Gateway
from oma_bridge.server.listeners import (
    ConnectionSlots,
    Listener,
    LiveConnections,
    hold_runtime_dir,
    open_tcp_listener,
    open_unix_listener,
)
from oma_bridge.server.methods import MethodRegistry
from oma_bridge.server.remote_profiles import check_remote_profiles
from oma_bridge.server.session import Session
from oma_bridge.server.tls import check_remote_listener, server_ssl_context
from oma_bridge.wire.params import NoParams, parse_params

__all__ = ["RunningServer", "serve"]

logger = logging.getLogger("oma_bridge.server")


@dataclass(eq=False)
class RunningServer:
    """A started daemon: where it listens, its token, and :meth:`stop`."""

    socket_path: Path | None
    url: str | None
    port: int | None
    discovery_path: Path
    gateway: Gateway
    token: str = field(repr=False)
    _slots: ConnectionSlots = field(repr=False)
    _policy: RequestPolicy = field(repr=False)
    _stopping: anyio.Event = field(default_factory=anyio.Event, repr=False)

    def stop(self) -> None:
        """Ask for a clean shutdown; :func:`serve` returns once it is done.

        ``/readyz`` answers ``stopping`` from this call on, before anything closes.
        """
        self._policy.readiness = "stopping"
        self._stopping.set()

    async def wait_stopping(self) -> None:
        """Return once shutdown has begun (a :meth:`stop` or a signal)."""
        await self._stopping.wait()

    @property
    def connections(self) -> int:
        """Connections currently counted against ``max_connections``."""
        return len(self._slots)


def _builtin_methods(gateway: Gateway) -> MethodRegistry:
    methods = MethodRegistry()

    async def agents_list(session: Session, params: Any) -> dict[str, Any]:
        parse_params(NoParams, params)
        return {"agents": gateway.profile_infos()}

    methods.add("agents/list", agents_list, inline=True)

    return methods


async def serve(
    config: ServerConfig,
    *,
    methods: MethodRegistry | None = None,
    handle_signals: bool = False,
    drain: Callable[[], Awaitable[None]] | None = None,
    acp: AcpEndpoints | None = None,
    slots: ConnectionSlots | None = None,
    metrics: Callable[[], str] | None = None,
    task_status: anyio.abc.TaskStatus[RunningServer] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run the daemon until stopped; see the module docstring.

    ``methods`` are the wire methods beyond the built-in ``agents/list``.
    ``handle_signals`` turns SIGTERM and SIGINT into a clean stop (main
    thread only).  ``drain`` is awaited at the stop once every connection
    is closed, while ``/readyz`` still answers ``stopping`` (the daemon ends
    its agents there).  ``slots`` count the connections against
    ``max_connections`` (the daemon's own, to show their number).  ``metrics``
    renders ``GET /metrics`` (PROTOCOL §20.3; without it, 404).  Start-up failures raise
    :class:`~oma_bridge.server.config.ConfigError` (the TLS pair, a remote
    listener without TLS, the token file, a remote profile's files) or
    :class:`~oma_bridge.server.listeners.StartupError`, before readiness.
    """
    settings = config.server
    ssl_context = server_ssl_context(config)
    check_remote_listener(config, tls=ssl_context is not None)
    check_remote_profiles(config)
    token = load_token(config)
    registry = MethodRegistry()
    gateway = Gateway(config, registry)
    gateway.acp = acp
    registry.include(_builtin_methods(gateway))
    if methods is not None:
        registry.include(methods)
    policy = RequestPolicy(token, settings)
    policy.profiles = lambda: gateway.config.agents
    policy.metrics = metrics
    slots = slots if slots is not None else ConnectionSlots(settings.max_connections)
    live = LiveConnections()
    options: dict[str, Any] = {
        "policy": policy,
        "slots": slots,
        "live": live,
        "max_message_bytes": settings.max_message_bytes,
    }
    folder = settings.discovery_dir
    listeners: list[Listener] = []
    # The token is blanked out of every log line, message and file while it serves.
    with holding_secret(token), hold_runtime_dir(folder, own=folder == default_runtime_dir()):
        try:
            if settings.socket is not None:
                listeners.append(
                    await open_unix_listener(settings.socket, gateway.handler("unix"), **options)
                )
            if settings.tcp is not None:
                listeners.append(
                    await open_tcp_listener(
                        settings.tcp,
                        gateway.handler("tcp"),
                        ssl_context=ssl_context,
                        port_retries=settings.tcp_port_retries,
                        **options,
                    )
                )
            tcp = next((listener for listener in listeners if listener.kind == "tcp"), None)
            url = tcp.url if tcp is not None else None
            discovery = write_discovery(folder, socket=settings.socket, url=url, token=token)
            try:
                running = RunningServer(
                    socket_path=settings.socket,
                    url=url,
                    port=tcp.port if tcp is not None else None,
                    discovery_path=discovery,
                    gateway=gateway,
                    token=token,
                    _slots=slots,
                    _policy=policy,
                )
                policy.readiness = "ready"
                logger.info(
                    "oma-bridge ready: socket %s, tcp %s, discovery %s",
                    settings.socket,
                    url,
                    discovery,
                )
                task_status.started(running)
                await _wait_for_stop(running, handle_signals)
            finally:
                policy.readiness = "stopping"  # also when the caller's scope was cancelled
                remove_discovery(discovery)
        finally:
            with anyio.CancelScope(shield=True):
                await _close(listeners, live, settings.stop_grace_s, drain)
    logger.info("oma-bridge stopped")


async def _wait_for_stop(running: RunningServer, handle_signals: bool) -> None:
    if not handle_signals:
        await running.wait_stopping()
        return
    async with anyio.create_task_group() as tg:

        async def on_signals() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    logger.info("received %s; stopping", signal.Signals(signum).name)
                    running.stop()
                    return

        tg.start_soon(on_signals)
        await running.wait_stopping()
        tg.cancel_scope.cancel()


async def _close(
    listeners: list[Listener],
    live: LiveConnections,
    grace: float,
    drain: Callable[[], Awaitable[None]] | None,
) -> None:
    # Connections first, listening sockets last: in between, the runs of the
    # closed connections end and the caller drains, while /healthz and
    # /readyz still answer and new upgrades get 503 (the policy).
    with anyio.move_on_after(grace + 1.0):
        await live.close()
    try:
        if drain is not None:
            await drain()
    finally:
        for listener in listeners:
            listener.server.close(close_connections=True)
        # Only handlers that outlived their grace are left: no long wait for them.
        with anyio.move_on_after(1.0):
            for listener in listeners:
                await listener.server.wait_closed()
        for listener in listeners:
            if listener.path is not None:
                with contextlib.suppress(OSError):
                    listener.path.unlink()
