"""``OpenMultiAgent``: one-off runs with progress, traces, budgets, evaluation; team runs.

``run_tasks`` and ``run_team`` live in :mod:`oma_bridge.orchestration.teams`
(docs/teams.md); every run they make goes through :meth:`run_observed`, the
run path of ``run_agent``.

The order of ``run_agent`` is OMA's: input preparation first (so rejected
input emits no progress, no trace and samples nothing), then the evaluation
copy, the effective config, ``agent_start``, the run, ``budget_exceeded``,
the cost cap, ``agent_complete``, the trace's close and the hand-over to
evaluation.  Run failures come back as results; only invalid input raises.
"""

from __future__ import annotations

import contextlib
import logging
import math
import secrets
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias

from oma_bridge import telemetry
from oma_bridge.agent import Agent, AgentConfig, PreparedInput
from oma_bridge.agent.input import text_only_kind
from oma_bridge.backends import PermissionHandler
from oma_bridge.backends.llm.config import LlmConfig
from oma_bridge.errors import CallbackError, CostBudgetExceededError, RunCancelledError
from oma_bridge.messages import AgentRunInput, copy_messages
from oma_bridge.orchestration.evaluation import EvaluationConfig, OnlineEvaluator
from oma_bridge.orchestration.outcome import TeamRunResult
from oma_bridge.orchestration.protocols import ProgressCallback
from oma_bridge.orchestration.roster import Roster, Team
from oma_bridge.orchestration.scheduler import RunControl
from oma_bridge.orchestration.tasks import TaskSpec
from oma_bridge.orchestration.teams import DEFAULT_MAX_CONCURRENCY, run_tasks, run_team
from oma_bridge.orchestration.tracing import (
    RunTracer,
    TraceCallback,
    call_quietly,
    open_run_trace,
)
from oma_bridge.results import (
    AgentRunResult,
    ErrorInfo,
    RunIdentity,
    RunStatus,
    TokenUsage,
)

__all__ = ["CostEstimator", "OpenMultiAgent", "ProgressCallback", "TraceCallback"]


logger = logging.getLogger(__name__)

#: ``estimate_cost(usage, {"agentName", "model", "provider", "phase", "taskId"}) -> cost``.
CostEstimator: TypeAlias = Callable[[TokenUsage, dict[str, Any]], float]

_COST_WITHOUT_ESTIMATOR = (
    "maxCostBudget requires estimateCost so cost caps cannot be silently ignored."
)


class OpenMultiAgent:
    """Runs one-off agents with progress events, traces, budgets and evaluation.

    ``max_cost_budget`` needs ``estimate_cost``.  ``evaluation`` takes an
    :class:`EvaluationConfig` (an evaluator is made for it) or a ready
    :class:`OnlineEvaluator`.  ``opentelemetry=True`` turns OpenTelemetry
    tracing on for the process (:func:`oma_bridge.telemetry.configure`; the
    ``otel`` extra), as the ``OTEL_EXPORTER_OTLP_ENDPOINT`` variable does.
    """

    def __init__(
        self,
        *,
        on_progress: ProgressCallback | None = None,
        on_trace: TraceCallback | None = None,
        max_token_budget: int | None = None,
        max_cost_budget: float | None = None,
        estimate_cost: CostEstimator | None = None,
        default_model: str | None = None,
        default_provider: str | None = None,
        evaluation: EvaluationConfig | OnlineEvaluator | None = None,
        opentelemetry: bool = False,
    ) -> None:
        if max_cost_budget is not None and estimate_cost is None:
            raise ValueError(_COST_WITHOUT_ESTIMATOR)
        self.on_progress = on_progress
        self.on_trace = on_trace
        self.max_token_budget = max_token_budget
        self.max_cost_budget = max_cost_budget
        self.estimate_cost = estimate_cost
        self.default_model = default_model
        self.default_provider = default_provider
        self.evaluator = (
            OnlineEvaluator(evaluation) if isinstance(evaluation, EvaluationConfig) else evaluation
        )
        if opentelemetry:
            telemetry.configure(enabled=True)  # RuntimeError without the extra
        self._live: dict[str, Agent] = {}
        self._teams: dict[str, RunControl] = {}

    def effective_config(self, config: AgentConfig) -> AgentConfig:
        """``config`` with the orchestrator's default model and provider filled in."""
        backend = config.backend
        if not isinstance(backend, LlmConfig):
            return config
        update: dict[str, Any] = {}
        if backend.model is None and self.default_model is not None:
            update["model"] = self.default_model
        if backend.provider is None and self.default_provider is not None:
            update["provider"] = self.default_provider
        if not update:
            return config
        return config.model_copy(update={"backend": backend.model_copy(update=update)})

    async def run_agent(
        self,
        config: AgentConfig,
        run_input: AgentRunInput | PreparedInput,
        *,
        run_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        permission_handler: PermissionHandler | None = None,
        on_progress: ProgressCallback | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentRunResult:
        """Run a fresh agent once.  Raises only for invalid input.

        ``run_input`` may come prepared (:func:`~oma_bridge.agent.input.prepare`
        against ``config``): the daemon refuses bad input before it queues the
        run, and it is not prepared again here.  ``on_progress`` here adds a
        per-call listener (the daemon sends those events to the calling
        connection) next to the orchestrator's own.  ``meta`` is the request's
        ``_meta``: its W3C trace context is the parent of the run's span, and
        an ACP agent gets it on its ``session/prompt``.
        """
        agent = Agent(self.effective_config(config), permission_handler=permission_handler)
        # Step 1: raises before anything is seen.
        prepared = run_input if isinstance(run_input, PreparedInput) else agent.prepare(run_input)
        prepared.check(text_only_kind(agent.config))
        messages = prepared.value
        evaluation_input: str | list[Any] = (
            prepared.prompt if prepared.prompt is not None else copy_messages(messages)
        )
        run_id = run_id or secrets.token_hex(16)
        identity = RunIdentity(run_id, 1, secrets.token_hex(16), secrets.token_hex(8))
        progress = self.progress_sender(on_progress)

        async def agent_progress(kind: str, data: Any) -> None:
            await progress({"type": kind, "agent": agent.name, "data": data})

        start_data = (
            {"prompt": prepared.prompt}
            if prepared.prompt is not None
            else {"messages": copy_messages(messages)}
        )
        self._live[run_id] = agent
        try:
            result, _cost = await self.run_observed(
                agent,
                prepared,
                identity=identity,
                run_id=run_id,
                start_data=start_data,
                progress=agent_progress,
                max_token_budget=self.max_token_budget,
                close=True,
                meta=meta,
            )
        finally:
            self._live.pop(run_id, None)
        if self.evaluator is not None:
            self.evaluator.submit(
                evaluation_input, result.to_wire(), agent=agent.name, metadata=metadata
            )
        return result

    def progress_sender(
        self, on_progress: ProgressCallback | None
    ) -> Callable[[dict[str, Any]], Awaitable[None]]:
        """Send an event to the orchestrator's listener and to a per-call one, quietly."""
        listeners = [cb for cb in (self.on_progress, on_progress) if cb is not None]

        async def send(event: dict[str, Any]) -> None:
            for listener in listeners:
                await call_quietly(listener, event, "on_progress")

        return send

    async def run_observed(
        self,
        agent: Agent,
        run_input: PreparedInput,
        *,
        identity: RunIdentity,
        run_id: str,
        start_data: Any,
        progress: Callable[[str, Any], Awaitable[None]],
        max_token_budget: int | None,
        phase: str = "agent",
        task_id: str | None = None,
        stopped: Callable[[], bool] | None = None,
        close: bool = False,
        meta: Mapping[str, Any] | None = None,
    ) -> tuple[AgentRunResult, float | None]:
        """One run of prepared input with ``agent_start``, the trace, budgets, ``agent_complete``.

        The run path of ``run_agent`` and of every run of a team (docs/teams.md).
        ``stopped()`` is asked right before the run starts: true makes it a
        ``cancelled`` result that never reached the agent (a team cancelled
        while this run announced itself).  ``close`` closes the agent once
        its run is over, before the result is reported.  Answers the result
        and its estimated cost (``None`` without an estimator).
        """
        await progress("agent_start", start_data)
        span, identity = open_run_trace(agent, identity, run_id, meta)  # None: tracing off
        tracer = RunTracer(identity, agent.name, llm=agent.kind == "llm", on_trace=self.on_trace)
        try:
            try:
                if stopped is not None and stopped():
                    result = AgentRunResult.failed(run_id, RunCancelledError(), "cancelled")
                else:
                    with telemetry.adopted(span):  # Agent.run's span is this one
                        result = await agent.run(
                            run_input,
                            run_id=run_id,
                            on_event=tracer.observe,
                            max_token_budget=max_token_budget,
                            meta=meta,
                        )
            finally:
                if close:
                    await agent.close()
            result.identity = identity
            if result.budget_exceeded and result.error_info is not None:
                info = result.error_info
                await progress(
                    "budget_exceeded",
                    {"name": info.name, "code": info.code, "message": info.message},
                )
            cost = await self._apply_cost_cap(agent, result, progress, phase=phase, task_id=task_id)
            await tracer.finish(result)
            if span is not None:
                span.finish(result)
        finally:
            if span is not None:
                span.end()
        await progress("agent_complete", result)
        return result, cost

    async def _apply_cost_cap(
        self,
        agent: Agent,
        result: AgentRunResult,
        progress: Callable[[str, Any], Any],
        *,
        phase: str,
        task_id: str | None,
    ) -> float | None:
        if self.estimate_cost is None:
            return None
        backend = agent.config.backend
        llm = backend if isinstance(backend, LlmConfig) else None
        info = {
            "agentName": agent.name,
            "model": llm.model if llm is not None else getattr(backend, "model", None),
            "provider": llm.provider if llm is not None else None,
            "phase": phase,
            "taskId": task_id,
        }
        try:
            cost = float(self.estimate_cost(TokenUsage(**result.token_usage.to_wire()), info))
            if not math.isfinite(cost) or cost < 0:
                raise ValueError(f"estimateCost returned an invalid cost: {cost}")
        except Exception as error:
            _fail(result, "error", CallbackError(f"estimateCost failed: {error}"), "callback")
            return None
        if self.max_cost_budget is not None and cost > self.max_cost_budget:
            exceeded = CostBudgetExceededError(agent.name, cost, self.max_cost_budget)
            await progress("budget_exceeded", exceeded.to_wire())
            _fail(result, "budget_exhausted", exceeded, "budget")
            result.budget_exceeded = True
        return cost

    async def run_tasks(
        self,
        team: Team | Roster,
        tasks: Sequence[TaskSpec | Mapping[str, Any]],
        *,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        run_id: str | None = None,
        max_token_budget: int | None = None,
        on_progress: ProgressCallback | None = None,
        permission_handler: PermissionHandler | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> TeamRunResult:
        """Run a DAG of tasks on a team's members (docs/teams.md).

        ``team`` is a :class:`Team` or its roster: a mapping of names to
        :class:`Agent` / :class:`AgentConfig`, or a list of them.  ``tasks``
        are :class:`TaskSpec` objects or wire mappings (``{"id"?, "title",
        "description", "assignee", "dependsOn"?, "maxRetries"?,
        "retryDelayMs"?, "retryBackoff"?}``).

        Refused before anything runs (no agent made, no event, no spawn): a
        non-string description (:class:`InvalidMessageError`), bad tasks
        (:class:`TaskGraphError`: shape, duplicate title or id, unknown
        ``dependsOn`` or assignee, cycle), a bad roster or option
        (:class:`TeamError`).  Then a task starts as soon as its
        dependencies completed, at most ``max_concurrency`` at once and one
        at a time per member; a failure skips its dependents; retryable
        failures are retried ``maxRetries`` times.  Every run of a member is
        a fresh conversation (``Agent.run`` semantics: no history); an ACP
        member keeps its session across the run's tasks.  Agents made from
        configs are closed before this returns.

        ``max_token_budget`` (the lower of it and the orchestrator's)
        bounds the whole run's usage: each run gets what is left as its
        ceiling, and the first crossing skips what has not started.
        ``cancel(run_id)`` cancels the running tasks and skips the rest;
        the result then says ``cancelled``.  Failures come back in the result.
        ``meta``: the request's ``_meta``, whose W3C trace context is the parent
        of the run's ``invoke_workflow`` span (tracing on).
        """
        return await run_tasks(
            self,
            team,
            tasks,
            max_concurrency=max_concurrency,
            run_id=run_id,
            max_token_budget=max_token_budget,
            on_progress=on_progress,
            permission_handler=permission_handler,
            meta=meta,
        )

    async def run_team(
        self,
        team: Team,
        goal: str,
        *,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        run_id: str | None = None,
        max_token_budget: int | None = None,
        on_progress: ProgressCallback | None = None,
        permission_handler: PermissionHandler | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> TeamRunResult:
        """Plan ``goal`` with the team's coordinator, run the plan, synthesise the answer.

        The coordinator (an llm agent) answers a JSON task array for the
        roster (each member's name, kind and role summary); a plan that does
        not parse or does not check gets one correction round, then fails the
        run (``success`` false, no tasks, ``output`` saying what was wrong).
        The tasks run as in :meth:`run_tasks`; the coordinator then writes
        ``output`` from their results (skipped when the run was cancelled or
        went over budget).  A non-string ``goal`` raises
        :class:`InvalidMessageError` before anything happens.
        """
        return await run_team(
            self,
            team,
            goal,
            max_concurrency=max_concurrency,
            run_id=run_id,
            max_token_budget=max_token_budget,
            on_progress=on_progress,
            permission_handler=permission_handler,
            meta=meta,
        )

    @contextlib.contextmanager
    def tracking_team(self, run_id: str, control: RunControl) -> Iterator[None]:
        """``run_id`` is live (and ``cancel(run_id)`` reaches ``control``) inside the block."""
        self._teams[run_id] = control
        try:
            yield
        finally:
            self._teams.pop(run_id, None)

    def is_live(self, run_id: str) -> bool:
        """Whether a ``run_agent`` or team run with this id is running."""
        return run_id in self._live or run_id in self._teams

    def cancel(self, run_id: str) -> bool:
        """Cancel a live ``run_agent`` call or team run; it returns a ``cancelled`` result."""
        team = self._teams.get(run_id)
        if team is not None:
            return team.cancel()
        agent = self._live.get(run_id)
        return agent.cancel(run_id) if agent is not None else False

    async def shutdown(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Drain the evaluator, if any."""
        if self.evaluator is not None:
            await self.evaluator.shutdown(timeout)


def _fail(result: AgentRunResult, code: Any, error: Any, kind: Any) -> None:
    result.success = False
    result.status = RunStatus(code, error.message)
    result.error_info = ErrorInfo.from_error(kind, error)
