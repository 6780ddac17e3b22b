"""The agent methods of the wire protocol: :class:`AgentService`, their method table.

Each handler reads its params and asks the owner of what it touches; the
owners are built here, once, and take only what they use:

* :class:`~.host.AgentHost`: the open agents, the sessions persisted before a
  restart (:mod:`.store`), opening from a profile plus the client's
  overrides (:mod:`.overrides`), resuming, closing, the idle reaper;
* :class:`~.runs.Runs`: every run queued and counted, served in the request
  or, with ``onDisconnect: "continue"``, beyond it;
* :class:`~.turns.TurnRunner`: a turn of an open agent, journaled
  (:mod:`.journal`) for ``agent/watch``, ``run/result`` and the ACP facade;
  input is prepared when the request arrives (-32010 before it is queued);
* :class:`~.remote.Remote`: hooks and permission prompts as requests to clients;
* :mod:`.one_off` and :mod:`.teams`: the orchestrator's runs (``oma/*``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from oma_bridge import observe
from oma_bridge._version import __version__
from oma_bridge.agent import PreparedInput, PreparedPrompt
from oma_bridge.errors import InvalidMessageError
from oma_bridge.event_loop import running_loop_name
from oma_bridge.orchestration.orchestrator import OpenMultiAgent
from oma_bridge.paths import default_state_dir
from oma_bridge.rpc.peer import NOT_NOW, NotNow
from oma_bridge.server.agents.capabilities import ProfileCapabilities
from oma_bridge.server.agents.host import AgentHost
from oma_bridge.server.agents.one_off import OneOffMethods, build_orchestrator
from oma_bridge.server.agents.overrides import check_forbidden
from oma_bridge.server.agents.probe import probe_infos
from oma_bridge.server.agents.remote import Remote
from oma_bridge.server.agents.runs import Runs
from oma_bridge.server.agents.side_effects import audit_observer
from oma_bridge.server.agents.status import live_processes, live_processes_now, run_rows, uptime
from oma_bridge.server.agents.store import SessionStore
from oma_bridge.server.agents.teams import TeamMethods
from oma_bridge.server.agents.turns import TurnMode, TurnRunner
from oma_bridge.server.agents.turnstile import Turnstile
from oma_bridge.server.audit import AUDIT_NAME, AuditLog
from oma_bridge.server.config import ServerConfig
from oma_bridge.server.methods import MethodRegistry
from oma_bridge.server.metrics import Metrics, Recorder
from oma_bridge.server.session import Session
from oma_bridge.server.worktrees import AgentWorktrees
from oma_bridge.wire.codes import invalid_message
from oma_bridge.wire.params import (
    AgentIdParams,
    AgentOverrides,
    AuditParams,
    NoParams,
    OpenParams,
    ProbeParams,
    RunIdParams,
    RunParams,
    WatchParams,
    parse_params,
)

__all__ = ["AgentService"]

logger = logging.getLogger("oma_bridge.server")

#: The most records one ``daemon/audit`` answer carries (a larger ``limit`` is cut to it).
MAX_AUDIT_RECORDS = 1000


class AgentService:
    """The agent methods of every connection, on the owners of the module docstring."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        orchestrator: OpenMultiAgent | None = None,
        state_dir: Path | None = None,
        connections: Callable[[], int] = lambda: 0,
        metrics: Recorder | None = None,
    ) -> None:
        self.config = config
        self.settings = config.server
        state = state_dir or default_state_dir()
        #: The daemon's recorder (PROTOCOL §20.3): run ends, audit records.
        self.metrics: Recorder = metrics or Metrics()
        self.runs = Runs(self.settings, self.metrics)
        self.orchestrator = orchestrator or build_orchestrator(config, state)
        audit_path = state / AUDIT_NAME if self.settings.audit_log else None
        self.audit = AuditLog(audit_path, tap=self.metrics.audited)
        self.remote = Remote(self.settings, self.audit)
        self.host = AgentHost(
            config,
            store=SessionStore(state / "sessions" if self.settings.persist_sessions else None),
            runs=self.runs,
            remote=self.remote,
            capabilities=ProfileCapabilities(),
            worktrees=AgentWorktrees(
                state / "worktrees", lambda: self.host.config, audit=self.audit
            ),
        )
        self.started = time.time()
        #: How many connections the daemon has (``daemon/status``).
        self.connections = connections
        self.turns = TurnRunner(self.host, self.runs, self.remote, Turnstile())

    # -- lifecycle ---------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve the daemon's background work until cancelled: sessions, idle agents."""
        restorable = self.host.restore()
        if restorable:
            logger.info("%d persisted session(s) can be resumed", restorable)
        unsubscribe = observe.subscribe(audit_observer(self.host, self.audit))
        evaluator = self.orchestrator.evaluator
        # The evaluator's workers are hosted here, for as long as the daemon
        # serves (aclose() drains them first, with the stop grace).
        evaluating = evaluator if evaluator is not None else contextlib.nullcontext()
        try:
            async with anyio.create_task_group() as tg, evaluating:
                await tg.start(self.runs.run)  # runs that continue after their connection
                tg.start_soon(self.host.store.run)
                tg.start_soon(self.host.reap_idle)
                task_status.started()
                await anyio.sleep_forever()
        finally:
            unsubscribe()

    def reload(self, config: ServerConfig) -> None:
        """New profiles for new agents; open agents keep the profile they have."""
        self.host.reload(config)
        self.config = config

    def methods(self) -> MethodRegistry:
        registry = MethodRegistry()
        # Quick handlers that never wait on a client or a process are served
        # inline by the connection's reader (no task per request).
        for name, handler in (
            ("agent/history", self.history),
            ("agent/reset", self.reset),
            ("agent/attach", self.attach),
            ("agent/unwatch", self.unwatch),
            ("run/cancel", self.cancel_run),
            ("run/result", self.run_result),
        ):
            registry.add(name, handler, inline=True)
        registry.add("daemon/status", self.status, inline=True, now=self.status_now)
        registry.add("agent/open", self.open_agent)
        registry.add("agent/fork", self.fork_agent)
        registry.add("agent/run", self.run_agent_turn)
        registry.add("agent/stream", self.run_agent_turn_streaming)
        registry.add("agent/prompt", self.prompt)
        registry.add("agent/close", self.close_agent)
        registry.add("agent/watch", self.watch)
        orchestrated = (self.host, self.runs, self.orchestrator, self.remote)
        OneOffMethods(*orchestrated).register(registry)  # oma/runAgent (one_off.py)
        TeamMethods(*orchestrated).register(registry)  # oma/runTasks, oma/runTeam (teams.py)
        registry.add("daemon/audit", self.audit_tail)
        registry.add("agents/probe", self.probe)
        host = self.host
        host.worktrees.register(registry, lambda: (host.agents, host.restorable))
        return registry

    # -- opening -------------------------------------------------------------------

    async def open_agent(self, session: Session, params: Any) -> dict[str, Any]:
        check_forbidden(params, "config")
        request = parse_params(OpenParams, params)
        worktrees = self.host.worktrees
        if request.resume is not None:
            self.host.resume(session, request.resume, request.profile)
            return {"agentId": request.resume, **worktrees.answer(request.resume)}
        overrides = request.config or AgentOverrides()
        hosted, answer = await self.host.open_in(session, request.profile, overrides, request.cwd)
        logger.info(
            "agent %s opened (profile %s) by %s", hosted.agent_id, request.profile, session.id
        )
        return {"agentId": hosted.agent_id, **answer}

    async def fork_agent(self, session: Session, params: Any) -> dict[str, Any]:
        """``agent/fork`` (PROTOCOL §22.4): ``fork.py``."""
        parent = self.host.get(parse_params(AgentIdParams, params).agentId)
        return {"agentId": (await self.host.fork(session, parent)).agent_id}

    async def run_agent_turn(self, session: Session, params: Any) -> dict[str, Any]:
        return await self._run_on_agent(session, params, "agent/run")

    async def prompt(self, session: Session, params: Any) -> dict[str, Any]:
        return await self._run_on_agent(session, params, "agent/prompt")

    async def run_agent_turn_streaming(self, session: Session, params: Any) -> dict[str, Any]:
        return await self._run_on_agent(session, params, "agent/stream")

    async def _run_on_agent(self, session: Session, params: Any, mode: TurnMode) -> dict[str, Any]:
        request = parse_params(RunParams, params)
        hosted = self.host.get(request.agentId)
        agent = hosted.agent
        try:
            prepared: PreparedInput | PreparedPrompt = (
                agent.prepare_prompt if mode == "agent/prompt" else agent.prepare
            )(request.input)
        except InvalidMessageError as error:
            raise invalid_message(error) from None
        result = await self.turns.turn(
            session,
            hosted,
            mode,
            prepared,
            journaled_input=request.input,
            run_id=request.runId,
            detach=request.onDisconnect == "continue",
            meta=request.meta,
        )
        return result.to_wire()

    # -- watching and results --------------------------------------------------------

    async def watch(self, session: Session, params: Any) -> dict[str, Any]:
        request = parse_params(WatchParams, params)
        hosted = self.host.get(request.agentId)
        return {"seq": await hosted.watch(session, request.afterSeq)}

    async def unwatch(self, session: Session, params: Any) -> dict[str, Any]:
        self.host.get(parse_params(AgentIdParams, params).agentId).unwatch(session)
        return {}

    async def run_result(self, session: Session, params: Any) -> dict[str, Any]:
        return self.host.result_of(parse_params(RunIdParams, params).runId)

    async def history(self, session: Session, params: Any) -> dict[str, Any]:
        hosted = self.host.get(parse_params(AgentIdParams, params).agentId)
        return {"messages": hosted.agent.get_history()}

    async def reset(self, session: Session, params: Any) -> dict[str, Any]:
        hosted = self.host.get(parse_params(AgentIdParams, params).agentId)
        self.host.reset(hosted)
        return {}

    async def close_agent(self, session: Session, params: Any) -> dict[str, Any]:
        hosted = self.host.get(parse_params(AgentIdParams, params).agentId)
        worktree = await self.host.close(hosted, forget=True)
        return {"worktree": worktree} if worktree is not None else {}

    async def attach(self, session: Session, params: Any) -> dict[str, Any]:
        self.host.attach(session, parse_params(AgentIdParams, params).agentId)
        return {}

    async def cancel_run(self, session: Session, params: Any) -> dict[str, Any]:
        run = self.runs.live.get(parse_params(RunIdParams, params).runId)
        return {"cancelled": run is not None and self.runs.cancel(run)}

    async def status(self, session: Session, params: Any) -> dict[str, Any]:
        parse_params(NoParams, params)
        return self._status(await live_processes())

    def status_now(self, session: Session, params: Any) -> dict[str, Any] | NotNow:
        """``daemon/status`` from the frame's own callback, when nothing in it has to wait (D25)."""
        parse_params(NoParams, params)
        processes = live_processes_now()
        return NOT_NOW if processes is None else self._status(processes)

    def _status(self, processes: list[dict[str, Any]]) -> dict[str, Any]:
        status = {
            "version": __version__,
            "uptimeS": uptime(self.started),
            "eventLoop": running_loop_name(),
            "connections": self.connections(),
            "agents": self.host.board.rows(),
            "runs": run_rows(self.runs.live),
            "processes": processes,
            "sessions": self.host.store.count(),
            "capabilities": self.host.profile_capabilities(),
            "runStats": self.metrics.run_stats(),  # the page's charts (§20.3)
        }
        if self.orchestrator.evaluator is not None:
            status["evaluation"] = self.orchestrator.evaluator.stats.to_wire()
        return status

    async def probe(self, session: Session, params: Any) -> dict[str, Any]:
        """``agents/probe`` (extension): ``agents/list`` once each asked acp agent started once."""
        asked = parse_params(ProbeParams, params).profiles
        return {"agents": await probe_infos(asked, self.host)}

    async def audit_tail(self, session: Session, params: Any) -> dict[str, Any]:
        """``daemon/audit`` (extension, for the status page): the newest audit records."""
        limit = min(parse_params(AuditParams, params).limit, MAX_AUDIT_RECORDS)
        return {"records": await anyio.to_thread.run_sync(self.audit.tail, limit)}

    async def aclose(self) -> None:
        """Cancel every run and close every agent (their processes end); keep their sessions."""
        self.runs.cancel_all()
        await self.host.close_all()
        with anyio.CancelScope(shield=True):
            await self.orchestrator.shutdown(self.settings.stop_grace_s)
        self.host.store.close()
        self.audit.close()
