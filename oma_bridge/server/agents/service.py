"""The agent methods of the wire protocol (PROTOCOL.md §4, §5): :class:`AgentService`.

The service owns the agents clients open and the runs they start:

* ``agent/open`` builds an :class:`~oma_bridge.Agent` from a declared profile
  plus the client's overrides (never a command, an environment or a folder);
* runs on one agent are served one at a time in arrival order (a FIFO lock),
  runs on different agents in parallel up to ``max_concurrent_runs``; past
  ``max_queued_runs`` waiting runs, a request is refused with -32001;
* input is prepared (guarded, boundary-checked, copied) when the request
  arrives, so bad input is answered -32010 before anything is queued;
* hooks go to the agent's hook owner and permission prompts to the
  connection that started the run, as daemon-to-client requests with their
  timeouts;
* a run ends with its connection (the connection cancels its handler), and
  an idle agent is closed after ``agent_idle_ttl_s``.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from oma_bridge._version import __version__
from oma_bridge.agent import (
    Agent,
    AgentConfig,
    RunStream,
    current_run_id,
    prepare_run_input,
    stopped_result,
)
from oma_bridge.backends import RUN_ID_LABEL, PermissionHandler, PermissionRequest
from oma_bridge.errors import CallbackError, InvalidMessageError, RunCancelledError, WireError
from oma_bridge.orchestration.evaluation import EvaluationConfig, JsonlFileStore, resolve_scorer
from oma_bridge.orchestration.orchestrator import OpenMultiAgent
from oma_bridge.paths import default_state_dir
from oma_bridge.results import AgentRunResult
from oma_bridge.rpc import ConnectionClosedError
from oma_bridge.server.config import ServerConfig
from oma_bridge.server.methods import MethodRegistry
from oma_bridge.server.profiles import Profile, agent_profile_info, profile_agent_config
from oma_bridge.server.session import Session
from oma_bridge.wire.codes import OVERLOADED, forbidden, invalid_message, not_found
from oma_bridge.wire.params import (
    AgentIdParams,
    AgentOverrides,
    HookFlags,
    NoParams,
    OpenParams,
    RunAgentParams,
    RunIdParams,
    RunParams,
    parse_params,
)

__all__ = ["AgentService"]

logger = logging.getLogger("oma_bridge.server")

#: Keys a client may never set: they choose what runs and where (§11.8).
FORBIDDEN_OVERRIDES = frozenset(
    {"command", "args", "env", "cwd", "kind", "provider", "base_url", "api_key_env"}
)
#: The supervisor labels of every process the daemon starts for an agent, so
#: that ``daemon/status`` can tell whose a child (or grandchild) is; the
#: process backend adds ``RUN_ID_LABEL`` to each run's.
AGENT_ID_LABEL = "agentId"


# ---------------------------------------------------------------------------
# Params


def _check_forbidden(params: Any, *path: str) -> None:
    """-32012 for the keys that choose what runs, before the shape check (§11.8)."""
    node = params
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    if isinstance(node, Mapping):
        chosen = sorted(FORBIDDEN_OVERRIDES.intersection(node))
        if chosen:
            raise forbidden(f"a client cannot set {', '.join(chosen)}: they come from the profile")


# ---------------------------------------------------------------------------
# Agents and runs


@dataclass(eq=False)
class HookTarget:
    """Where an agent's hooks go: the agent, its profile, the owning connection."""

    agent_id: str
    profile_name: str
    profile: Profile
    owner: Session | None


@dataclass(eq=False)
class HostedAgent(HookTarget):
    agent: Agent
    hooks: HookFlags
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    queued: int = 0
    running: int = 0
    users: set[Session] = field(default_factory=set)
    idle_since: float | None = None
    closed: bool = False

    @property
    def uses_hooks(self) -> bool:
        return self.hooks.beforeRun or self.hooks.afterRun

    def busy(self) -> bool:
        return self.queued > 0 or self.running > 0

    def connected(self) -> bool:
        if self.uses_hooks:
            return self.owner is not None and not self.owner.closed
        return any(not user.closed for user in self.users)


@dataclass(eq=False)
class LiveRun:
    run_id: str
    agent_id: str | None
    method: str
    session: Session
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    started_at: float | None = None
    cancel: Callable[[], bool] | None = None
    cancel_requested: bool = False


def _least_privilege_reject(request: PermissionRequest) -> str | None:
    by_kind = {option.kind: option.option_id for option in request.options}
    return by_kind.get("reject_once") or by_kind.get("reject_always")


class AgentService:
    """Hosts the agents and runs of every connection; see the module docstring."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        orchestrator: OpenMultiAgent | None = None,
        state_dir: Path | None = None,
    ) -> None:
        self.config = config
        self.settings = config.server
        self.agents: dict[str, HostedAgent] = {}
        self.runs: dict[str, LiveRun] = {}
        self.orchestrator = orchestrator or _orchestrator(config, state_dir)
        self.started = time.time()
        self._slots = anyio.CapacityLimiter(self.settings.max_concurrent_runs)
        self._queued = 0
        self.connections: Callable[[], int] = lambda: 0

    # -- profiles and configs -----------------------------------------------

    def reload(self, config: ServerConfig) -> None:
        """New profiles for new agents; open agents keep the profile they have."""
        self.config = config

    def _profile(self, name: str) -> Profile:
        profile = self.config.agents.get(name)
        if profile is None:
            raise not_found(f'no agent profile named "{name}"')
        return profile

    def _agent_config(
        self,
        profile_name: str,
        profile: Profile,
        overrides: AgentOverrides | None,
        labels: Mapping[str, str],
    ) -> AgentConfig:
        """The profile's config with the client's overrides and our process labels."""
        base = profile_agent_config(profile_name, profile, self.settings)
        overrides = overrides or AgentOverrides()
        update: dict[str, Any] = {}
        if overrides.name is not None:
            update["name"] = overrides.name
        if overrides.systemPrompt is not None:
            update["system_prompt"] = overrides.systemPrompt
        if overrides.maxTurns is not None:
            update["max_turns"] = overrides.maxTurns
        if overrides.timeoutMs is not None:  # narrows the profile's limit, never widens it
            limits = [t for t in (base.timeout_ms, overrides.timeoutMs) if t is not None]
            update["timeout_ms"] = min(limits)
        if overrides.maxTokenBudget is not None:
            ceilings = [
                b for b in (base.max_token_budget, overrides.maxTokenBudget) if b is not None
            ]
            update["max_token_budget"] = min(ceilings)
        if base.backend is not None:
            backend: Any = base.backend
            update["backend"] = backend.model_copy(update={"labels": {**backend.labels, **labels}})
        if overrides.history is not None:
            # AgentConfig guards it: an invalid history raises InvalidMessageError (-32010).
            return AgentConfig(**{**dict(base), **update, "history": overrides.history})
        return base.model_copy(update=update)

    # -- hooks and permissions over the wire ---------------------------------

    def _hooks(self, target: Callable[[], HookTarget], flags: HookFlags) -> dict[str, Any]:
        """The agent's hooks, served by ``target().owner`` over the wire."""
        timeout = self.settings.hook_timeout_s

        async def ask(method: str, params: dict[str, Any]) -> Any:
            hosted = target()
            owner = hosted.owner
            if owner is None or owner.closed:
                raise CallbackError(
                    f'the hook owner of agent "{hosted.agent_id}" is disconnected; '
                    "reconnect and call agent/attach"
                )
            try:
                with anyio.fail_after(timeout):
                    return await owner.request(method, params)
            except TimeoutError:
                raise CallbackError(f"{method} got no answer within {timeout:g}s") from None
            except ConnectionClosedError:
                raise CallbackError(f"the hook owner disconnected during {method}") from None
            except WireError as error:
                raise CallbackError(f"{method} failed: {error.message}") from None

        async def before_run(context: dict[str, Any]) -> Any:
            hosted = target()
            answer = await ask(
                "hook/beforeRun",
                {
                    "agentId": hosted.agent_id,
                    "runId": current_run_id.get(),
                    "context": {
                        "prompt": context["prompt"],
                        "messages": context["messages"],
                        "agent": agent_profile_info(hosted.profile_name, hosted.profile),
                    },
                },
            )
            if not isinstance(answer, Mapping):
                raise CallbackError("hook/beforeRun answered something other than an object")
            return answer

        async def after_run(result: AgentRunResult) -> AgentRunResult:
            hosted = target()
            answer = await ask(
                "hook/afterRun",
                {"agentId": hosted.agent_id, "runId": result.run_id, "result": result.to_wire()},
            )
            try:
                if not isinstance(answer, Mapping):
                    raise ValueError("the answer is not an object")
                return AgentRunResult.from_wire(answer.get("result"))
            except ValueError as error:
                raise CallbackError(f"hook/afterRun answered a malformed result: {error}") from None

        hooks: dict[str, Any] = {}
        if flags.beforeRun:
            hooks["before_run"] = before_run
        if flags.afterRun:
            hooks["after_run"] = after_run
        return hooks

    def _permission_handler(
        self, session: Session, agent_id: str | None
    ) -> PermissionHandler | None:
        if not session.capabilities.permissions:
            return None  # nobody to ask: the backend picks the least-privilege reject
        timeout = self.settings.permission_timeout_s

        async def ask(request: PermissionRequest) -> str | None:
            params = {
                "agentId": agent_id,
                "runId": request.run_id,
                "toolCall": dict(request.tool_call),
                "options": [
                    {"optionId": o.option_id, "name": o.name, "kind": o.kind}
                    for o in request.options
                ],
            }
            try:
                with anyio.fail_after(timeout):
                    answer = await session.request("permission/request", params)
            except TimeoutError:
                return _least_privilege_reject(request)
            except (WireError, ConnectionClosedError):
                return _least_privilege_reject(request)
            return _chosen_option(answer, request)

        return ask

    # -- the methods -----------------------------------------------------------

    def methods(self) -> MethodRegistry:
        registry = MethodRegistry()
        # Quick handlers that never wait on a client or a process are served
        # inline by the connection's reader (no task per request).
        for name, handler in (
            ("agent/history", self.history),
            ("agent/reset", self.reset),
            ("agent/attach", self.attach),
            ("run/cancel", self.cancel_run),
            ("daemon/status", self.status),
        ):
            registry.add(name, handler, inline=True)
        registry.add("agent/open", self.open_agent)
        registry.add("agent/run", self.run)
        registry.add("agent/stream", self.stream)
        registry.add("agent/prompt", self.prompt)
        registry.add("agent/close", self.close_agent)
        registry.add("oma/runAgent", self.run_agent)
        return registry

    async def open_agent(self, session: Session, params: Any) -> dict[str, Any]:
        _check_forbidden(params, "config")
        request = parse_params(OpenParams, params)
        overrides = request.config or AgentOverrides()
        flags = overrides.hooks or HookFlags()
        self._check_declared_hooks(session, flags)
        profile = self._profile(request.profile)
        hosted: HostedAgent | None = None

        def target() -> HookTarget:
            assert hosted is not None  # hooks run only once the agent exists
            return hosted

        agent_id = "agt_" + secrets.token_hex(8)
        try:
            config = self._agent_config(
                request.profile, profile, overrides, {AGENT_ID_LABEL: agent_id}
            )
            config = config.model_copy(update=self._hooks(target, flags))
        except InvalidMessageError as error:
            raise invalid_message(error) from None
        hosted = HostedAgent(
            agent_id=agent_id,
            profile_name=request.profile,
            profile=profile,
            agent=Agent(config),
            hooks=flags,
            owner=session if flags.beforeRun or flags.afterRun else None,
        )
        self.agents[agent_id] = hosted
        self._use(hosted, session)
        logger.info("agent %s opened (profile %s) by %s", agent_id, request.profile, session.id)
        return {"agentId": agent_id}

    def _check_declared_hooks(self, session: Session, flags: HookFlags) -> None:
        declared = set(session.capabilities.hooks)
        missing = [
            name
            for name in ("beforeRun", "afterRun")
            if getattr(flags, name) and name not in declared
        ]
        if missing:
            raise WireError(
                -32602,
                "Invalid params",
                {
                    "errors": [
                        {
                            "loc": ["config", "hooks", name],
                            "msg": f"hook {name} was not declared in initialize",
                        }
                        for name in missing
                    ]
                },
            )

    def _hosted(self, agent_id: str) -> HostedAgent:
        hosted = self.agents.get(agent_id)
        if hosted is None or hosted.closed:
            raise not_found(f'no open agent with id "{agent_id}"')
        return hosted

    def _use(self, hosted: HostedAgent, session: Session) -> None:
        if session not in hosted.users:
            hosted.users.add(session)
            session.on_close(lambda _session: self._mark_idle(hosted))
        hosted.idle_since = None

    def _mark_idle(self, hosted: HostedAgent) -> None:
        if not hosted.busy() and not hosted.connected() and hosted.idle_since is None:
            hosted.idle_since = time.monotonic()

    async def run(self, session: Session, params: Any) -> dict[str, Any]:
        return await self._run_on_agent(session, params, "agent/run")

    async def prompt(self, session: Session, params: Any) -> dict[str, Any]:
        return await self._run_on_agent(session, params, "agent/prompt")

    async def stream(self, session: Session, params: Any) -> dict[str, Any]:
        return await self._run_on_agent(session, params, "agent/stream")

    def _new_run(
        self, run_id: str | None, agent_id: str | None, method: str, session: Session
    ) -> LiveRun:
        run_id = run_id or secrets.token_hex(16)
        if run_id in self.runs:
            raise WireError(
                -32602,
                "Invalid params",
                {"errors": [{"loc": ["runId"], "msg": f'run id "{run_id}" is already live'}]},
            )
        if self._queued >= self.settings.max_queued_runs:
            raise WireError(OVERLOADED, "Overloaded: too many runs queued", {"retryAfterMs": 1000})
        return LiveRun(run_id, agent_id, method, session)

    async def _run_on_agent(self, session: Session, params: Any, method: str) -> dict[str, Any]:
        request = parse_params(RunParams, params)
        hosted = self._hosted(request.agentId)
        agent = hosted.agent
        try:
            if method == "agent/prompt":
                turn = agent.prepare_prompt_input(request.input)
            else:
                messages = agent.prepare_run_input(request.input)
        except InvalidMessageError as error:
            raise invalid_message(error) from None
        run = self._new_run(request.runId, hosted.agent_id, method, session)
        run_id = run.run_id
        permission = self._permission_handler(session, hosted.agent_id)
        self._use(hosted, session)

        async def execute() -> AgentRunResult:
            if method == "agent/prompt":
                return await agent.execute_prompt(
                    turn, run_id=run_id, permission_handler=permission
                )
            if method == "agent/run":
                return await agent.execute(messages, run_id=run_id, permission_handler=permission)
            stream = RunStream(agent, messages, run_id, permission_handler=permission)
            async with stream:
                async for event in stream:
                    await session.notify("run/event", {"runId": run_id, "event": event.to_wire()})
            assert stream.result is not None
            return stream.result

        run.cancel = lambda: agent.cancel(run_id)
        result = await self._serve_run(run, hosted, execute)
        return result.to_wire()

    async def _serve_run(
        self, run: LiveRun, hosted: HostedAgent | None, execute: Callable[[], Any]
    ) -> AgentRunResult:
        """Queue (FIFO per agent, then a global slot), execute, account."""
        self.runs[run.run_id] = run
        self._queued += 1
        if hosted is not None:
            hosted.queued += 1
        queued = True
        try:
            with run.scope:
                lock = hosted.lock if hosted is not None else contextlib.nullcontext()
                async with lock, self._slots:
                    self._queued -= 1
                    queued = False
                    if hosted is not None:
                        hosted.queued -= 1
                        hosted.running += 1
                    run.started_at = time.time()
                    try:
                        return await execute()  # type: ignore[no-any-return]
                    finally:
                        if hosted is not None:
                            hosted.running -= 1
            # The scope caught a cancel while the run was queued: nothing was spawned (D5).
            return stopped_result(run.run_id, RunCancelledError(), "cancelled", "cancelled")
        finally:
            if queued:
                self._queued -= 1
                if hosted is not None:
                    hosted.queued -= 1
            self.runs.pop(run.run_id, None)
            if hosted is not None:
                self._mark_idle(hosted)

    async def run_agent(self, session: Session, params: Any) -> dict[str, Any]:
        _check_forbidden(params, "config")
        request = parse_params(RunAgentParams, params)
        overrides = request.config
        flags = overrides.hooks or HookFlags()
        self._check_declared_hooks(session, flags)
        profile = self._profile(overrides.profile)
        run_id = request.runId or secrets.token_hex(16)
        try:
            config = self._agent_config(
                overrides.profile,
                profile,
                AgentOverrides(**overrides.model_dump(exclude={"profile"})),
                {RUN_ID_LABEL: run_id},
            )
        except InvalidMessageError as error:
            raise invalid_message(error) from None
        if flags.beforeRun or flags.afterRun:
            # A one-off agent's hooks go to the connection that started it.
            one_off = HookTarget("", overrides.profile, profile, session)
            config = config.model_copy(update=self._hooks(lambda: one_off, flags))
        try:
            prepare_run_input(request.input, config)  # -32010 before anything is queued
        except InvalidMessageError as error:
            raise invalid_message(error) from None
        run = self._new_run(run_id, None, "oma/runAgent", session)

        async def progress(event: dict[str, Any]) -> None:
            data = event.get("data")
            if isinstance(data, AgentRunResult):
                event = {**event, "data": data.to_wire()}
            await session.notify("oma/progress", {"runId": run_id, "event": event})

        async def execute() -> AgentRunResult:
            return await self.orchestrator.run_agent(
                config,
                request.input,
                run_id=run_id,
                metadata=request.metadata,
                permission_handler=self._permission_handler(session, None),
                on_progress=progress,
            )

        run.cancel = lambda: self.orchestrator.cancel(run_id)
        result = await self._serve_run(run, None, execute)
        return result.to_wire()

    async def history(self, session: Session, params: Any) -> dict[str, Any]:
        hosted = self._hosted(parse_params(AgentIdParams, params).agentId)
        return {"messages": hosted.agent.get_history()}

    async def reset(self, session: Session, params: Any) -> dict[str, Any]:
        hosted = self._hosted(parse_params(AgentIdParams, params).agentId)
        hosted.agent.reset()
        return {}

    async def close_agent(self, session: Session, params: Any) -> dict[str, Any]:
        hosted = self._hosted(parse_params(AgentIdParams, params).agentId)
        await self._close(hosted)
        return {}

    async def _close(self, hosted: HostedAgent) -> None:
        hosted.closed = True
        self.agents.pop(hosted.agent_id, None)
        for run in list(self.runs.values()):
            if run.agent_id == hosted.agent_id:
                self._cancel(run)
        with anyio.CancelScope(shield=True):
            await hosted.agent.close()
        logger.info("agent %s closed", hosted.agent_id)

    async def attach(self, session: Session, params: Any) -> dict[str, Any]:
        hosted = self._hosted(parse_params(AgentIdParams, params).agentId)
        self._check_declared_hooks(session, hosted.hooks)
        hosted.owner = session if hosted.uses_hooks else hosted.owner
        self._use(hosted, session)
        return {}

    async def cancel_run(self, session: Session, params: Any) -> dict[str, Any]:
        run = self.runs.get(parse_params(RunIdParams, params).runId)
        return {"cancelled": run is not None and self._cancel(run)}

    def _cancel(self, run: LiveRun) -> bool:
        run.cancel_requested = True
        if run.started_at is None:
            run.scope.cancel()
            return True
        return run.cancel() if run.cancel is not None else False

    async def status(self, session: Session, params: Any) -> dict[str, Any]:
        parse_params(NoParams, params)
        status = {
            "version": __version__,
            "uptimeS": round(time.time() - self.started, 3),
            "connections": self.connections(),
            "agents": [
                {
                    "agentId": hosted.agent_id,
                    "profile": hosted.profile_name,
                    "kind": hosted.agent.kind,
                    "state": hosted.agent.state.status,
                    "queuedRuns": hosted.queued,
                }
                for hosted in self.agents.values()
            ],
            "runs": [
                {
                    "runId": run.run_id,
                    "agentId": run.agent_id,
                    "method": run.method,
                    "startedAt": run.started_at,
                }
                for run in self.runs.values()
            ],
            "processes": await self._live_processes(),
        }
        if self.orchestrator.evaluator is not None:
            status["evaluation"] = self.orchestrator.evaluator.stats.to_wire()
        return status

    async def _live_processes(self) -> list[dict[str, Any]]:
        """Every live process the daemon started for an agent, grandchildren included (§11.15).

        The supervisor lists them with the labels ``_agent_config`` gave
        their child (and the process backend's run id).
        """
        from oma_bridge.supervision.supervisor import default_supervisor

        processes: list[dict[str, Any]] = []
        for pid, labels, rss in await default_supervisor().processes():
            agent_id = labels.get(AGENT_ID_LABEL)
            entry: dict[str, Any] = {"pid": pid, "agentId": agent_id, "rssBytes": rss}
            if (run_id := labels.get(RUN_ID_LABEL)) is not None:
                entry["runId"] = run_id
            processes.append(entry)
        return processes

    # -- lifecycle ---------------------------------------------------------------

    async def reap_idle(self, *, interval_s: float | None = None) -> None:
        """Close agents idle for ``agent_idle_ttl_s``; runs until cancelled."""
        ttl = self.settings.agent_idle_ttl_s
        interval = interval_s if interval_s is not None else max(0.05, min(ttl / 4, 30.0))
        while True:
            await anyio.sleep(interval)
            now = time.monotonic()
            for hosted in list(self.agents.values()):
                self._mark_idle(hosted)
                if hosted.idle_since is not None and now - hosted.idle_since >= ttl:
                    if hosted.busy() or hosted.connected():
                        hosted.idle_since = None
                        continue
                    logger.info("agent %s idle for %.0fs: closing it", hosted.agent_id, ttl)
                    await self._close(hosted)

    async def aclose(self) -> None:
        """Cancel every run and close every agent (their processes end)."""
        for run in list(self.runs.values()):
            self._cancel(run)
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for hosted in list(self.agents.values()):
                    tg.start_soon(self._close, hosted)
            await self.orchestrator.shutdown(self.settings.stop_grace_s)


def _orchestrator(config: ServerConfig, state_dir: Path | None) -> OpenMultiAgent:
    """The orchestrator of ``oma/runAgent``, with evaluation when the config asks for it."""
    section = config.evaluation
    if section is None:
        return OpenMultiAgent()
    store = section.store or (state_dir or default_state_dir()) / "evaluations.jsonl"
    evaluation = EvaluationConfig(
        scorers=[resolve_scorer(spec) for spec in section.scorers],
        sample=section.sample,
        max_concurrent=section.max_concurrent,
        max_queue_length=section.max_queue_length,
        store=JsonlFileStore(store),
        store_payloads=section.store_payloads,
    )
    return OpenMultiAgent(evaluation=evaluation)


def _chosen_option(answer: Any, request: PermissionRequest) -> str | None:
    """The client's answer to a permission request; anything malformed is a reject."""
    outcome = answer.get("outcome") if isinstance(answer, Mapping) else None
    if isinstance(outcome, Mapping):
        if outcome.get("outcome") == "cancelled":
            return None
        chosen = outcome.get("optionId")
        if outcome.get("outcome") == "selected" and any(
            option.option_id == chosen for option in request.options
        ):
            return str(chosen)
    logger.warning("a malformed permission answer was taken as a reject")
    return _least_privilege_reject(request)
