"""The whole daemon: listeners (:func:`~oma_bridge.server.app.serve`) plus the agent service.

:func:`run_daemon` is what ``oma-bridge serve`` runs.  Start-up reaps the
process groups an earlier daemon left behind (its state file) before it
spawns anything; shutdown closes the listeners and connections first (their
runs are cancelled), then every agent (their process trees end), within
``stop_grace_s`` plus a little.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from ..orchestrator import OpenMultiAgent
from ..process.supervisor import configure_supervisor, reap_leftovers
from .agent_service import AgentService
from .app import RunningServer, serve
from .config import ServerConfig

__all__ = ["default_state_dir", "run_daemon"]

logger = logging.getLogger("oma_bridge.server")


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/oma-bridge``, else ``~/.local/state/oma-bridge``."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "oma-bridge"


class _Started:
    """Forwards readiness to the caller and hands the running server to the service."""

    def __init__(self, service: AgentService, outer: anyio.abc.TaskStatus[RunningServer]) -> None:
        self.service = service
        self.outer = outer

    def started(self, value: RunningServer | None = None) -> None:
        assert value is not None
        self.service.connections = lambda: value.connections
        self.outer.started(value)


async def run_daemon(
    config: ServerConfig,
    *,
    state_dir: Path | None = None,
    handle_signals: bool = False,
    orchestrator: OpenMultiAgent | None = None,
    task_status: anyio.abc.TaskStatus[RunningServer] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until stopped (``RunningServer.stop()``, or SIGTERM with ``handle_signals``)."""
    state_dir = state_dir or default_state_dir()
    reaped = reap_leftovers(state_dir)
    if reaped:
        logger.warning("reaped the processes of %d earlier daemon(s) that died", reaped)
    try:
        configure_supervisor(state_dir=state_dir)
    except RuntimeError:
        # Children were already spawned in this process (a library user, or
        # tests running several daemons): keep the supervisor they used.
        logger.debug("process supervisor already configured; keeping it")
    service = AgentService(config, orchestrator=orchestrator)
    started: Any = _Started(service, task_status)
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.reap_idle)
        try:
            await serve(
                config,
                methods=service.methods(),
                handle_signals=handle_signals,
                task_status=started,
            )
        finally:
            with anyio.CancelScope(shield=True):
                await service.aclose()
            tg.cancel_scope.cancel()
