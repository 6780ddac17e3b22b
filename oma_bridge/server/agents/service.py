"""The agent methods of the wire protocol: :class:`AgentService`.

The service composes the jobs of this package:

* ``agent/open`` builds an :class:`~oma_bridge.Agent` from a declared profile
  plus the client's overrides (:mod:`.overrides`), or reattaches to an agent
  persisted before a restart (:mod:`.store`);
* runs are queued and counted in :mod:`.runs`; input is prepared (guarded,
  boundary-checked, copied) when the request arrives, so bad input is
  answered -32010 before anything is queued;
* everything that happens on an agent is journaled (:mod:`.journal`), which
  ``agent/watch`` replays and follows (:mod:`.watchers`) and ``run/result``
  reads;
* hooks and permission prompts go to clients as requests (:mod:`.remote`);
* a run ends with its connection unless it asked ``onDisconnect:
  "continue"``; an idle agent is closed after ``agent_idle_ttl_s``.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread

from oma_bridge import observe
from oma_bridge._version import __version__
from oma_bridge.agent import PreparedInput, PreparedPrompt, prepare
from oma_bridge.agent.stream import closing_events
from oma_bridge.errors import InvalidMessageError, WireError
from oma_bridge.orchestration.evaluation import EvaluationConfig, JsonlFileStore, resolve_scorer
from oma_bridge.orchestration.orchestrator import OpenMultiAgent
from oma_bridge.paths import default_state_dir
from oma_bridge.results import AgentRunResult, StreamEvent
from oma_bridge.rpc import unwrap_single_error
from oma_bridge.server.agents.capabilities import ProfileCapabilities
from oma_bridge.server.agents.host import AgentHost, check_declared_hooks
from oma_bridge.server.agents.overrides import agent_config, check_forbidden
from oma_bridge.server.agents.probe import probe_profiles, probed_names
from oma_bridge.server.agents.registry import HookTarget, HostedAgent
from oma_bridge.server.agents.relay import CallerRelay
from oma_bridge.server.agents.remote import Remote
from oma_bridge.server.agents.runs import Runs
from oma_bridge.server.agents.status import (
    RUN_ID_LABEL,
    agent_rows,
    live_processes,
    run_rows,
    uptime,
)
from oma_bridge.server.agents.store import SessionStore
from oma_bridge.server.agents.teams import TeamMethods
from oma_bridge.server.agents.turnstile import Turnstile
from oma_bridge.server.agents.watchers import Watcher, check_cursor
from oma_bridge.server.audit import AUDIT_NAME, AuditLog
from oma_bridge.server.config import ServerConfig
from oma_bridge.server.methods import MethodRegistry
from oma_bridge.server.profiles import agent_profile_infos
from oma_bridge.server.sandboxing import require_sandbox
from oma_bridge.server.session import Session
from oma_bridge.wire.codes import (
    RUN_IN_PROGRESS,
    invalid_message,
    not_found,
)
from oma_bridge.wire.params import (
    AgentIdParams,
    AgentOverrides,
    AuditParams,
    HookFlags,
    NoParams,
    OpenParams,
    ProbeParams,
    RunAgentParams,
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
    """Hosts the agents and runs of every connection; see the module docstring."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        orchestrator: OpenMultiAgent | None = None,
        state_dir: Path | None = None,
        connections: Callable[[], int] = lambda: 0,
    ) -> None:
        self.config = config
        self.settings = config.server
        state = state_dir or default_state_dir()
        self.runs = Runs(self.settings)
        self.orchestrator = orchestrator or _orchestrator(config, state)
        self.audit = AuditLog(state / AUDIT_NAME if self.settings.audit_log else None)
        self.remote = Remote(self.settings, self.audit)
        self.host = AgentHost(
            config,
            store=SessionStore(state / "sessions" if self.settings.persist_sessions else None),
            runs=self.runs,
            remote=self.remote,
            capabilities=ProfileCapabilities(),
        )
        self.started = time.time()
        #: How many connections the daemon has (``daemon/status``).
        self.connections = connections
        #: Every run's events pass it: a bounded share of each loop iteration (D23).
        self.turnstile = Turnstile()

    # -- lifecycle ---------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve the daemon's background work until cancelled: sessions, idle agents."""
        restorable = self.host.restore()
        if restorable:
            logger.info("%d persisted session(s) can be resumed", restorable)
        unsubscribe = observe.subscribe(self._audit_side_effect)
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

    def _audit_side_effect(self, event: str, fields: dict[str, Any]) -> None:
        """Spawns, exits, file writes and denials, terminals: into the audit log.

        A ``note`` (an acp agent's earlier session could not be continued,
        PROTOCOL §13.4) goes into the agent's journal instead.
        """
        agent_id = fields.pop("agentId", None)
        hosted = self.host.agents.get(agent_id) if agent_id else None
        if event == "note":
            if hosted is not None and isinstance(fields.get("text"), str):
                # Appended at once, unpaced (an observer cannot wait): one small
                # entry, written while the agent starts, before its turn's events.
                hosted.journal.append({"type": "note", "text": fields["text"]})
            return
        if event == "spawn" and hosted is not None:
            fields["profile"] = hosted.profile_name
        self.audit.record(event, agent_id, **fields)

    def reload(self, config: ServerConfig) -> None:
        """New profiles for new agents; open agents keep the profile they have."""
        self.host.reload(config)
        self.config = config

    def profile_capabilities(self) -> dict[str, dict[str, Any]]:
        """What each acp profile's agents said they can do, the open agents heard now."""
        return self.host.profile_capabilities()

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
            ("daemon/status", self.status),
        ):
            registry.add(name, handler, inline=True)
        registry.add("agent/open", self.open_agent)
        registry.add("agent/run", self.run_agent_turn)
        registry.add("agent/stream", self.run_agent_turn_streaming)
        registry.add("agent/prompt", self.prompt)
        registry.add("agent/close", self.close_agent)
        registry.add("agent/watch", self.watch)
        registry.add("oma/runAgent", self.run_agent)
        TeamMethods(self).register(registry)  # oma/runTasks, oma/runTeam (teams.py)
        registry.add("daemon/audit", self.audit_tail)
        registry.add("agents/probe", self.probe)
        return registry

    # -- opening -------------------------------------------------------------------

    async def open_agent(self, session: Session, params: Any) -> dict[str, Any]:
        check_forbidden(params, "config")
        request = parse_params(OpenParams, params)
        if request.resume is not None:
            self.host.resume(session, request.resume, request.profile)
            return {"agentId": request.resume}
        hosted = self.host.open(session, request.profile, request.config or AgentOverrides())
        logger.info(
            "agent %s opened (profile %s) by %s", hosted.agent_id, request.profile, session.id
        )
        return {"agentId": hosted.agent_id}

    # -- runs on an agent ----------------------------------------------------------

    async def run_agent_turn(self, session: Session, params: Any) -> dict[str, Any]:
        return await self._run_on_agent(session, params, "agent/run")

    async def prompt(self, session: Session, params: Any) -> dict[str, Any]:
        return await self._run_on_agent(session, params, "agent/prompt")

    async def run_agent_turn_streaming(self, session: Session, params: Any) -> dict[str, Any]:
        return await self._run_on_agent(session, params, "agent/stream")

    async def _run_on_agent(self, session: Session, params: Any, method: str) -> dict[str, Any]:
        request = parse_params(RunParams, params)
        hosted = self.host.get(request.agentId)
        try:
            prepared: PreparedInput | PreparedPrompt = (
                hosted.agent.prepare_prompt(request.input)
                if method == "agent/prompt"
                else hosted.agent.prepare(request.input)
            )
        except InvalidMessageError as error:
            raise invalid_message(error) from None
        result = await self.turn(
            session,
            hosted,
            method,
            prepared,
            journaled_input=request.input,
            run_id=request.runId,
            keep_going=request.onDisconnect == "continue",
        )
        return result.to_wire()

    async def turn(
        self,
        session: Session,
        hosted: HostedAgent,
        method: str,
        prepared: PreparedInput | PreparedPrompt,
        *,
        journaled_input: Any,
        run_id: str | None = None,
        keep_going: bool = False,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentRunResult:
        """Queue and run one turn of already prepared input on ``hosted``, journaling it.

        ``method`` says how: ``agent/run`` (fresh), ``agent/stream`` (fresh, with
        ``run/event`` to ``session``), ``agent/prompt`` or ``session/prompt``
        (a turn of the agent's history; ``prepared`` is the user turn).  The
        agent takes ``prepared`` as it is: it was guarded and copied once, when
        the request came.  ``meta``: the request's ``_meta`` for the agent (never journaled).
        """
        agent = hosted.agent
        await require_sandbox(agent.config)  # -32015 before anything is queued (§19.1)
        run = self.runs.new(run_id, hosted.agent_id, method, session)
        run_id = run.run_id
        permission = self.remote.permission_handler(session, hosted)
        hosted.use(session)
        journal = hosted.journal
        relay = (
            CallerRelay(session, journal, run_id, joins=self.settings.join_text)
            if method == "agent/stream"
            else None
        )
        turn = self.turnstile.turn

        async def emit(event: StreamEvent) -> None:
            wire = event.to_wire()
            raw = event.acp_update
            if (
                relay is not None
                and raw is None
                and wire["type"] == "text"
                and not hosted.paced  # a join adds bytes no paced reader was waited for
                and relay.join(wire["data"])
            ):
                return
            # Before an entry's work (a join above costs next to nothing): many
            # streams' entries in one loop iteration would hold up every other
            # connection's reads (D23).
            await turn()
            if wire["type"] == "update":  # a raw ACP update is an entry of its own (§13.3)
                entry = await hosted.record({"type": "update", "update": wire["data"]})
            elif raw is None:
                entry = await hosted.record({"type": "event", "runId": run_id, "event": wire})
            elif wire["type"] in ("text", "reasoning"):
                # A chunk with more than its text: the entry keeps the update as
                # sent, for the ACP facade to relay unchanged (docs/acp.md).
                data = {"type": "event", "runId": run_id, "event": wire, "update": raw}
                entry = await hosted.record(data)
            else:  # a typed ACP update (D15): journaled raw as every update is, streamed typed
                entry = await hosted.record({"type": "update", "update": raw})
            if relay is not None:
                # At once to an idle connection; joined into while its socket is
                # backed up (server/agents/relay.py).  The caller's socket still
                # paces the run, and a client that stops reading is dropped by
                # the send watchdog.
                await relay.send(entry, wire)

        async def execute() -> AgentRunResult:
            await hosted.record(
                {"type": "run_start", "runId": run_id, "method": method, "input": journaled_input},
            )
            if relay is None:
                return await run_turn()
            # The relay's sender lives as long as the turn: every run/event has
            # gone (or been dropped with the connection) before the answer.
            with unwrap_single_error():
                async with anyio.create_task_group() as group:
                    group.start_soon(relay.run)
                    try:
                        result = await run_turn()
                    finally:
                        relay.close()
            return result

        async def run_turn() -> AgentRunResult:
            if isinstance(prepared, PreparedPrompt):
                result = await agent.prompt(
                    prepared, run_id=run_id, on_event=emit, permission_handler=permission, meta=meta
                )
            elif method == "agent/run":
                result = await agent.run(
                    prepared, run_id=run_id, on_event=emit, permission_handler=permission, meta=meta
                )
            else:
                # The stream's events as Agent.stream gives them, but emitted from
                # the run itself: each is journaled and sent before the next is
                # made (the caller's socket paces the run), with no hand-over
                # between two tasks, which cost more than the relay's own work.
                # A hook failure is a result like any other here; its closing
                # events are the stream's (``error`` alone).
                result = await agent.run(
                    prepared,
                    run_id=run_id,
                    on_event=emit,
                    permission_handler=permission,
                    meta=meta,
                )
                for event in closing_events(result):
                    await emit(event)
            with anyio.CancelScope(shield=True):  # the result is the record: always journaled
                end = {"type": "run_end", "runId": run_id, "result": result.to_wire()}
                await hosted.record(end)
            self.host.save(hosted)
            return result

        run.cancel = lambda: agent.cancel(run_id)
        return await self.runs.serve(run, hosted, execute, detach=keep_going)

    async def run_agent(self, session: Session, params: Any) -> dict[str, Any]:
        check_forbidden(params, "config")
        request = parse_params(RunAgentParams, params)
        overrides = request.config
        flags = overrides.hooks or HookFlags()
        check_declared_hooks(session, flags)
        profile = self.host.profile(overrides.profile)
        run_id = request.runId or secrets.token_hex(16)
        try:
            config = agent_config(
                overrides.profile,
                profile,
                self.settings,
                AgentOverrides(**overrides.model_dump(exclude={"profile"})),
                {RUN_ID_LABEL: run_id},
            )
        except InvalidMessageError as error:
            raise invalid_message(error) from None
        if flags.beforeRun or flags.afterRun:
            # A one-off agent's hooks go to the connection that started it.
            one_off = HookTarget("", overrides.profile, profile, session)
            config = config.model_copy(update=self.remote.hooks(lambda: one_off, flags))
        try:
            prepared = prepare(request.input, config)  # -32010 before anything is queued
        except InvalidMessageError as error:
            raise invalid_message(error) from None
        await require_sandbox(config)
        run = self.runs.new(run_id, None, "oma/runAgent", session)

        async def progress(event: dict[str, Any]) -> None:
            data = event.get("data")
            if isinstance(data, AgentRunResult):
                event = {**event, "data": data.to_wire()}
            await session.notify("oma/progress", {"runId": run_id, "event": event})

        async def execute() -> AgentRunResult:
            return await self.orchestrator.run_agent(
                config,
                prepared,
                run_id=run_id,
                metadata=request.metadata,
                permission_handler=self.remote.permission_handler(session, None),
                on_progress=progress,
            )

        run.cancel = lambda: self.orchestrator.cancel(run_id)
        result = await self.runs.serve(
            run, None, execute, detach=request.onDisconnect == "continue"
        )
        return result.to_wire()

    # -- watching ------------------------------------------------------------------

    async def watch(self, session: Session, params: Any) -> dict[str, Any]:
        request = parse_params(WatchParams, params)
        hosted = self.host.get(request.agentId)
        journal = hosted.journal
        cursor = journal.last_seq if request.afterSeq is None else request.afterSeq
        check_cursor(journal, cursor)
        previous = hosted.watchers.pop(session, None)
        if previous is not None:
            previous.stop()
        watcher = Watcher(session, hosted.agent_id, journal, cursor)
        await watcher.catch_up()
        # No await between the catch-up and the registration: nothing falls between.
        hosted.watchers[session] = watcher
        hosted.use(session)
        watcher.on_stop(session.on_close(lambda _session: self._unwatch(hosted, session)))
        session.start_soon(watcher.pump)
        return {"seq": watcher.cursor}

    async def unwatch(self, session: Session, params: Any) -> dict[str, Any]:
        hosted = self.host.get(parse_params(AgentIdParams, params).agentId)
        self._unwatch(hosted, session)
        return {}

    def _unwatch(self, hosted: HostedAgent, session: Session) -> None:
        watcher = hosted.watchers.pop(session, None)
        if watcher is not None:
            watcher.stop()

    async def run_result(self, session: Session, params: Any) -> dict[str, Any]:
        run_id = parse_params(RunIdParams, params).runId
        if run_id in self.runs.live:
            raise WireError(RUN_IN_PROGRESS, f'Run in progress: "{run_id}"', {"running": True})
        host = self.host
        journals = [[e.data for e in hosted.journal.entries()] for hosted in host.agents.values()]
        # A session read back at start answers too, before anyone resumes it.
        journals += [[data for _seq, data in s.entries] for s in host.restorable.values()]
        for journal in journals:
            for data in reversed(journal):
                if data["type"] == "run_end" and data["runId"] == run_id:
                    return data["result"]  # type: ignore[no-any-return]
        finished = self.runs.finished.get(run_id)
        if finished is not None:
            return finished.to_wire()
        raise not_found(f'no finished run with id "{run_id}" in any journal')

    # -- the quick methods ---------------------------------------------------------

    async def history(self, session: Session, params: Any) -> dict[str, Any]:
        hosted = self.host.get(parse_params(AgentIdParams, params).agentId)
        return {"messages": hosted.agent.get_history()}

    async def reset(self, session: Session, params: Any) -> dict[str, Any]:
        hosted = self.host.get(parse_params(AgentIdParams, params).agentId)
        self.host.reset(hosted)
        return {}

    async def close_agent(self, session: Session, params: Any) -> dict[str, Any]:
        hosted = self.host.get(parse_params(AgentIdParams, params).agentId)
        await self.host.close(hosted, forget=True)
        return {}

    async def attach(self, session: Session, params: Any) -> dict[str, Any]:
        hosted = self.host.get(parse_params(AgentIdParams, params).agentId)
        check_declared_hooks(session, hosted.hooks)
        hosted.owner = session if hosted.uses_hooks else hosted.owner
        hosted.use(session)
        return {}

    async def cancel_run(self, session: Session, params: Any) -> dict[str, Any]:
        run = self.runs.live.get(parse_params(RunIdParams, params).runId)
        return {"cancelled": run is not None and self.runs.cancel(run)}

    async def status(self, session: Session, params: Any) -> dict[str, Any]:
        parse_params(NoParams, params)
        status = {
            "version": __version__,
            "uptimeS": uptime(self.started),
            "connections": self.connections(),
            "agents": agent_rows(self.host.agents),
            "runs": run_rows(self.runs.live),
            "processes": await live_processes(),
            "sessions": self.host.store.count(),
            "capabilities": self.profile_capabilities(),
        }
        if self.orchestrator.evaluator is not None:
            status["evaluation"] = self.orchestrator.evaluator.stats.to_wire()
        return status

    async def probe(self, session: Session, params: Any) -> dict[str, Any]:
        """``agents/probe`` (extension): ``agents/list`` once each asked acp agent started once."""
        config = self.config
        names = probed_names(parse_params(ProbeParams, params).profiles, config.agents)
        capabilities = self.host.capabilities
        problems = await probe_profiles(names, config.agents, self.settings, capabilities)
        infos = agent_profile_infos(config.agents, self.profile_capabilities(), problems)
        return {"agents": infos}

    async def audit_tail(self, session: Session, params: Any) -> dict[str, Any]:
        """``daemon/audit`` (extension, for the status page): the newest audit records."""
        limit = min(parse_params(AuditParams, params).limit, MAX_AUDIT_RECORDS)
        return {"records": await anyio.to_thread.run_sync(self.audit.tail, limit)}

    # -- shutdown ------------------------------------------------------------------

    async def aclose(self) -> None:
        """Cancel every run and close every agent (their processes end); keep their sessions."""
        for run in list(self.runs.live.values()):
            self.runs.cancel(run)
        await self.host.close_all()
        with anyio.CancelScope(shield=True):
            await self.orchestrator.shutdown(self.settings.stop_grace_s)
        self.host.store.close()
        self.audit.close()


def _orchestrator(config: ServerConfig, state_dir: Path) -> OpenMultiAgent:
    """The orchestrator of ``oma/runAgent``, with evaluation when the config asks for it."""
    section = config.evaluation
    if section is None:
        return OpenMultiAgent()
    store = section.store or state_dir / "evaluations.jsonl"
    evaluation = EvaluationConfig(
        scorers=[resolve_scorer(spec) for spec in section.scorers],
        sample=section.sample,
        max_concurrent=section.max_concurrent,
        max_queue_length=section.max_queue_length,
        store=JsonlFileStore(store),
        store_payloads=section.store_payloads,
    )
    return OpenMultiAgent(evaluation=evaluation)
