"""``run_tasks`` and ``run_team``: task DAGs and coordinated teams over any kind of agent.

The entry points of ``OpenMultiAgent.run_tasks`` / ``run_team``
(docs/teams.md has the semantics and the differences from the reference).
Everything that can be refused is refused before anything runs: the roster
(:mod:`~oma_bridge.orchestration.roster`), the text-only rule, the task
graph (:mod:`~oma_bridge.orchestration.tasks`).  Then one :class:`_TeamRun` owns the run:
its agents (one per assignee, closed at the end when the run made them), its
budget ledger, its :class:`~oma_bridge.orchestration.scheduler.RunControl`
and its progress events.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from oma_bridge.agent import Agent, PreparedInput
from oma_bridge.agent.config import smallest_ceiling
from oma_bridge.backends import PermissionHandler
from oma_bridge.errors import (
    CostBudgetExceededError,
    OMAError,
    TeamError,
    TokenBudgetExceededError,
)
from oma_bridge.messages import LLMMessage, text_message
from oma_bridge.orchestration.outcome import (
    OUTPUT_SEPARATOR,
    TeamRunResult,
    TeamTask,
    combined_output,
    tasks_status,
)
from oma_bridge.orchestration.planner import read_plan
from oma_bridge.orchestration.prompts import decomposition_prompt, repair_prompt, synthesis_prompt
from oma_bridge.orchestration.protocols import ProgressCallback, TeamOrchestrator
from oma_bridge.orchestration.roster import (
    AgentLike,
    Roster,
    Team,
    coordinator_agent,
    make_agent,
    member_info,
    members_of,
)
from oma_bridge.orchestration.scheduler import RunControl, Scheduler
from oma_bridge.orchestration.tasks import PlannedTask, TaskSpec, check_goal_text, plan_tasks
from oma_bridge.orchestration.tracing import workflow_span
from oma_bridge.results import AgentRunResult, RunIdentity, RunStatus, TokenUsage

if TYPE_CHECKING:
    from oma_bridge.telemetry.spans import WorkflowSpan

__all__ = ["DEFAULT_MAX_CONCURRENCY", "run_tasks", "run_team"]

DEFAULT_MAX_CONCURRENCY = 4


async def run_tasks(
    oma: TeamOrchestrator,
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
    """See :meth:`OpenMultiAgent.run_tasks`."""
    members = members_of(team.agents if isinstance(team, Team) else team)
    _check_concurrency(max_concurrency)
    planned = plan_tasks(tasks, members)
    run_id = run_id or secrets.token_hex(16)
    with workflow_span("runTasks", run_id, meta) as workflow:
        async with _TeamRun.open(
            oma, members, run_id, max_token_budget, on_progress, permission_handler
        ) as run:
            run.traced_by(workflow)
            result = await run.tasks_result(planned, max_concurrency)
            return run.traced_result(workflow, result)


async def run_team(
    oma: TeamOrchestrator,
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
    """See :meth:`OpenMultiAgent.run_team`."""
    if not isinstance(team, Team):
        raise TeamError("run_team takes a Team (its members and its coordinator)")
    members = members_of(team.agents)
    if not members:
        raise TeamError("a team needs at least one member")
    _check_concurrency(max_concurrency)
    check_goal_text(goal)
    run_id = run_id or secrets.token_hex(16)
    with workflow_span("runTeam", run_id, meta) as workflow:
        async with _TeamRun.open(
            oma, members, run_id, max_token_budget, on_progress, permission_handler
        ) as run:
            run.traced_by(workflow)
            coordinator = run.adopt(
                coordinator_agent(
                    oma.effective_config, team.coordinator, run.agents, permission_handler
                )
            )
            result = await run.team_result(coordinator, goal, max_concurrency)
            return run.traced_result(workflow, result)


def _check_concurrency(limit: object) -> None:
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise TeamError(f"max_concurrency must be an integer >= 1, got {limit!r}")


# ---------------------------------------------------------------------------
# One run


class _TeamRun:
    """The state of one team run: its agents, budget, control and events."""

    def __init__(
        self,
        oma: TeamOrchestrator,
        agents: dict[str, Agent],
        run_id: str,
        max_token_budget: int | None,
        on_progress: ProgressCallback | None,
    ) -> None:
        self.oma = oma
        self.agents = agents
        self.run_id = run_id
        self.control = RunControl()
        self.usage = TokenUsage()
        self.cost = 0.0
        self.token_budget = smallest_ceiling(oma.max_token_budget, max_token_budget)
        self.trace_id = secrets.token_hex(16)
        self.coordinator_results: list[AgentRunResult] = []
        self._send = oma.progress_sender(on_progress)
        self._owned: list[Agent] = []

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        oma: TeamOrchestrator,
        members: Mapping[str, AgentLike],
        run_id: str | None,
        max_token_budget: int | None,
        on_progress: ProgressCallback | None,
        permission_handler: PermissionHandler | None,
    ) -> AsyncIterator[_TeamRun]:
        """The run, registered for ``cancel(run_id)``; every agent it made is closed after."""
        run_id = run_id or secrets.token_hex(16)
        if oma.is_live(run_id):
            raise TeamError(f'run id "{run_id}" is already live')
        agents: dict[str, Agent] = {}
        owned: list[Agent] = []
        for name, member in members.items():
            if isinstance(member, Agent):
                agents[name] = member
            else:
                agent = make_agent(oma.effective_config, member, permission_handler)
                agents[name] = agent
                owned.append(agent)
        run = cls(oma, agents, run_id, max_token_budget, on_progress)
        run._owned = owned
        try:
            with oma.tracking_team(run_id, run.control):
                try:
                    yield run
                finally:
                    run.control.finished = True
        finally:
            # Shielded: the run's processes must be gone even when it was cancelled.
            with anyio.CancelScope(shield=True):
                for agent in run._owned:
                    await agent.close()

    def traced_by(self, workflow: WorkflowSpan | None) -> None:
        """The run's trace is its ``invoke_workflow`` span's (tracing on)."""
        if workflow is not None:
            self.trace_id = workflow.trace_id

    @staticmethod
    def traced_result(workflow: WorkflowSpan | None, result: TeamRunResult) -> TeamRunResult:
        if workflow is not None:
            workflow.finish(result.success, result.status.code)
        return result

    def adopt(self, agent: Agent) -> Agent:
        """Close ``agent`` with the run's own agents."""
        self._owned.append(agent)
        return agent

    # -- events and budgets --------------------------------------------------

    async def emit(self, kind: str, agent: str, task: str | None, data: Any) -> None:
        event: dict[str, Any] = {"type": kind, "agent": agent}
        if task is not None:
            event["task"] = task
        event["data"] = data
        await self._send(event)

    def remaining_budget(self) -> int | None:
        if self.token_budget is None:
            return None
        return max(self.token_budget - self.usage.total, 0)

    async def charge(
        self, agent: str, task: str | None, result: AgentRunResult, cost: float | None
    ) -> None:
        """Count a run's usage as it comes in; the first crossing stops the run."""
        self.usage.add(result.token_usage)
        self.cost += cost or 0.0
        exceeded: OMAError | None = None
        if self.token_budget is not None and self.usage.total > self.token_budget:
            exceeded = TokenBudgetExceededError(agent, self.usage.total, self.token_budget)
        budget = self.oma.max_cost_budget
        if exceeded is None and budget is not None and self.cost > budget:
            exceeded = CostBudgetExceededError(agent, self.cost, budget)
        if exceeded is None or self.control.stop_code is not None:
            return
        if not result.budget_exceeded:  # a run that hit the ceiling announced it already
            await self.emit("budget_exceeded", agent, task, exceeded.to_wire())
        self.control.stop("budget_exhausted", exceeded.message)

    # -- runs ------------------------------------------------------------------

    async def run(
        self,
        agent: Agent,
        run_input: PreparedInput,
        *,
        key: str,
        attempt: int,
        start_data: dict[str, Any],
        phase: str,
        task: str | None,
    ) -> AgentRunResult:
        """One run of a member or of the coordinator, cancellable by the run's control."""
        run_id = f"{self.run_id}:{key}:{attempt}"
        identity = RunIdentity(self.run_id, attempt, self.trace_id, secrets.token_hex(8))

        async def progress(kind: str, data: Any) -> None:
            await self.emit(kind, agent.name, task, data)

        self.control.live[key] = (agent, run_id)
        try:
            result, cost = await self.oma.run_observed(
                agent,
                run_input,
                identity=identity,
                run_id=run_id,
                start_data=start_data,
                progress=progress,
                max_token_budget=self.remaining_budget(),
                phase=phase,
                task_id=task,
                stopped=lambda: self.control.cancel_requested,
            )
        finally:
            self.control.live.pop(key, None)
        await self.charge(agent.name, task, result, cost)
        return result

    async def _run_task(self, task: TeamTask, prompt: str, attempt: int) -> AgentRunResult:
        # Agent.run semantics (a fresh conversation: no history in, none kept),
        # through run_observed so that progress, traces and the run budget
        # apply.  An ACP member's backend keeps its session across the run's tasks.
        agent = self.agents[task.assignee]
        return await self.run(
            agent,
            agent.prepare(prompt),
            key=task.id,
            attempt=attempt,
            start_data={"prompt": prompt, "taskId": task.id, "attempt": attempt},
            phase="task",
            task=task.id,
        )

    async def _emit_task(self, kind: str, task: TeamTask, data: dict[str, Any]) -> None:
        await self.emit(kind, task.assignee, task.id, data)

    async def execute(self, planned: list[PlannedTask], max_concurrency: int) -> list[TeamTask]:
        tasks = {
            p.id: TeamTask(p.id, p.title, p.assignee, p.spec.description, p.depends_on)
            for p in planned
        }
        scheduler = Scheduler(
            planned,
            tasks,
            run_attempt=self._run_task,
            emit=self._emit_task,
            control=self.control,
            max_concurrency=max_concurrency,
        )
        await scheduler.run()
        return [tasks[p.id] for p in planned]

    # -- results ---------------------------------------------------------------

    async def tasks_result(self, planned: list[PlannedTask], max_concurrency: int) -> TeamRunResult:
        tasks = await self.execute(planned, max_concurrency)
        return self._result(tasks, combined_output(tasks), tasks_status(tasks))

    async def team_result(
        self, coordinator: Agent, goal: str, max_concurrency: int
    ) -> TeamRunResult:
        planned = await self._plan(coordinator, goal)
        if isinstance(planned, TeamRunResult):
            return planned
        tasks = await self.execute(planned, max_concurrency)
        status = tasks_status(tasks)
        if self.control.stop_code is not None:  # cancelled or over budget: no synthesis
            return self._result(tasks, combined_output(tasks), status)
        prompt = synthesis_prompt(goal, tasks)
        synthesis = await self._coordinate(coordinator, [text_message(prompt)], "synthesis", prompt)
        if not synthesis.success:
            why = synthesis.status.message or synthesis.output
            output = (
                f"Coordinator synthesis failed: {why}{OUTPUT_SEPARATOR}{combined_output(tasks)}"
            )
            code = "error" if status.code == "ok" else status.code
            return self._result(
                tasks, output, RunStatus(code, f"Coordinator synthesis failed: {why}")
            )
        return self._result(tasks, synthesis.output, status)

    async def _coordinate(
        self, coordinator: Agent, messages: list[LLMMessage], phase: str, prompt: str
    ) -> AgentRunResult:
        # The coordinator's own conversation (an llm agent): messages this run
        # made, vouched for as they are, not taken in again.
        result = await self.run(
            coordinator,
            PreparedInput(messages, None),
            key=phase,
            attempt=1,
            start_data={"phase": phase, "prompt": prompt},
            phase=phase,
            task=None,
        )
        self.coordinator_results.append(result)
        return result

    async def _plan(self, coordinator: Agent, goal: str) -> list[PlannedTask] | TeamRunResult:
        """The coordinator's plan, after one correction round if it needs one."""
        members = [member_info(agent) for agent in self.agents.values()]
        prompt = decomposition_prompt(goal, members)
        messages = [text_message(prompt)]
        for phase in ("decomposition", "repair"):
            result = await self._coordinate(coordinator, messages, phase, prompt)
            if not result.success:
                why = result.status.message or result.output
                message = f"Coordinator decomposition failed: {why}"
                return self._result([], message, RunStatus(result.status.code, message))
            planned, issues = read_plan(result.output, list(self.agents))
            if not issues:
                return planned
            # The correction round: the same conversation, told what was wrong.
            prompt = repair_prompt(issues)
            messages = [*messages, *result.messages, text_message(prompt)]
        message = f"Coordinator plan failed validation after repair: {' '.join(issues)}"
        return self._result([], message, RunStatus("error", message))

    def _result(self, tasks: list[TeamTask], output: str, status: RunStatus) -> TeamRunResult:
        if self.control.cancel_requested:
            status = RunStatus("cancelled", "Run cancelled by caller.")
        elif self.control.stop_code == "budget_exhausted":
            status = RunStatus("budget_exhausted", self.control.stop_message)
        return TeamRunResult(
            run_id=self.run_id,
            success=status.code == "ok",
            output=output,
            tasks=tasks,
            token_usage=TokenUsage(**self.usage.to_wire()),
            status=status,
            coordinator=list(self.coordinator_results),
        )
