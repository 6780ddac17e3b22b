"""``oma/runTasks`` and ``oma/runTeam``: the library's team runs served over the wire.

docs/contract.md §15 and docs/teams.md.  The members are daemon **profiles**
(any kind); each member's :class:`~oma_bridge.agent.AgentConfig` is built from
its profile exactly as ``oma/runAgent`` builds one
(:func:`.overrides.agent_config`, with the run's id as the ``runId``
supervisor label of its processes), so a client names profiles and never
chooses a command.

Everything that can be refused is refused before the run is queued, so that
no agent is opened, no progress is sent and nothing is spawned, in this order:

1. **text only**: a task ``description`` or a ``goal`` that is not a string
   (an ``LLMMessage[]``, a ``ContentBlock[]``, anything else): -32010, the
   library's own check and message, before the shape check (which would
   call a list where a string belongs -32602);
2. the params' shape: -32602;
3. ``oma/runTeam``: an unknown profile in the team: -32011; a coordinator
   that is not an llm profile, or a profile listed twice: -32602;
4. ``oma/runTasks``: the task graph (duplicate titles or ids, unknown
   ``dependsOn``, cycles, assignees that are no declared profile):
   -32602 with one ``errors`` item per issue, each naming its task;
5. a live ``runId`` (-32602) and the queue limit (-32001), as for every run.

A team run is then one run of the daemon (:mod:`.runs`): it is queued, takes
one of ``max_concurrent_runs``, is listed by ``daemon/status``, ``run/cancel``
cancels it (every running task ends ``cancelled``, its processes ended, the
rest ``skipped``) and ``onDisconnect`` applies as for ``oma/runAgent``.  For
that machinery it is an :class:`AgentRunResult` that sums it up (``output``,
``status``, ``tokenUsage``), which is also what ``run/result`` answers for
its id; the request's answer is the :class:`TeamRunResult` itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeAlias

import anyio

from oma_bridge.agent import AgentConfig
from oma_bridge.backends import RUN_ID_LABEL, PermissionHandler
from oma_bridge.errors import InvalidMessageError, TaskGraphError
from oma_bridge.orchestration.orchestrator import ProgressCallback
from oma_bridge.orchestration.outcome import TeamRunResult, TeamTask, combined_output
from oma_bridge.orchestration.roster import Team
from oma_bridge.orchestration.scheduler import RunControl
from oma_bridge.orchestration.tasks import (
    PlannedTask,
    check_goal_text,
    check_text_only,
    plan_tasks,
)
from oma_bridge.orchestration.teams import DEFAULT_MAX_CONCURRENCY
from oma_bridge.results import AgentRunResult, RunStatus, TokenUsage
from oma_bridge.server.agents.one_off import OrchestratedMethods, progress_sender
from oma_bridge.server.agents.overrides import agent_config
from oma_bridge.server.agents.runs import LiveRun
from oma_bridge.server.methods import MethodRegistry
from oma_bridge.server.session import Session
from oma_bridge.server.task_worktrees import TaskWorktrees
from oma_bridge.server.worktrees import is_worktree_profile
from oma_bridge.wire.codes import invalid_message, invalid_params
from oma_bridge.wire.params import RunTasksParams, RunTeamParams, parse_params

__all__ = ["TeamMethods"]

#: Starts the library's team run with the request's progress sender and permission handler.
_Start: TypeAlias = Callable[[ProgressCallback, PermissionHandler], Awaitable[TeamRunResult]]


class TeamMethods(OrchestratedMethods):
    """The team methods on the daemon's profiles, runs and orchestrator."""

    def register(self, registry: MethodRegistry) -> None:
        registry.add("oma/runTasks", self.run_tasks)
        registry.add("oma/runTeam", self.run_team)

    async def run_tasks(self, session: Session, params: Any) -> dict[str, Any]:
        tasks = params.get("tasks") if isinstance(params, Mapping) else None
        if isinstance(tasks, list):
            _text_only(check_text_only, tasks)
        request = parse_params(RunTasksParams, params)
        wire_tasks = [task.task() for task in request.tasks]
        try:
            # The roster is every declared profile, so that an unknown
            # assignee is refused naming its task and the profiles there are.
            planned = plan_tasks(wire_tasks, self.host.config.agents)
        except TaskGraphError as error:
            raise invalid_params(
                [{"loc": ["tasks"], "msg": issue, "type": "task_graph"} for issue in error.issues]
            ) from None
        host = self.host
        profiles = host.config.agents
        TaskWorktrees.check(request.tasks, planned, profiles)  # -32602 before anything is made
        run = self.runs.new(request.runId, None, "oma/runTasks", session)
        plain = (t.assignee for t in planned if not is_worktree_profile(profiles[t.assignee]))
        roster = self._roster(plain, run.run_id)
        # A task of a cwd = "worktree" profile: a member of its own, in its own worktree.
        trees = TaskWorktrees(host.worktrees)
        roster |= await trees.make(
            request.tasks,
            planned,
            profiles,
            wire_tasks,
            lambda name, profile, update: agent_config(
                name, profile, host.settings, None, {RUN_ID_LABEL: run.run_id},
                backend_update=update,
            ),
        )  # fmt: skip
        concurrency = request.maxConcurrency or DEFAULT_MAX_CONCURRENCY

        async def start(progress: ProgressCallback, ask: PermissionHandler) -> TeamRunResult:
            try:
                return await self.orchestrator.run_tasks(
                    roster,
                    wire_tasks,
                    max_concurrency=concurrency,
                    run_id=run.run_id,
                    on_progress=progress,
                    permission_handler=ask,
                    meta=request.meta,
                )
            finally:
                with anyio.CancelScope(shield=True):
                    await trees.end()

        answer = await self._serve(
            session, run, start, planned, request.onDisconnect, event=trees.event
        )
        await trees.end()  # a run cancelled while it waited for a slot never started
        return trees.answer(answer)

    async def run_team(self, session: Session, params: Any) -> dict[str, Any]:
        if isinstance(params, Mapping) and "goal" in params:
            _text_only(check_goal_text, params["goal"])
        request = parse_params(RunTeamParams, params)
        team = request.team
        for name in (*team.agents, team.coordinator):
            self.host.profile(name)  # -32011 for a profile not declared
        duplicates = sorted({name for name in team.agents if team.agents.count(name) > 1})
        if duplicates:
            raise invalid_params(
                [
                    {"loc": ["team", "agents"], "msg": f'profile "{name}" is listed twice'}
                    for name in duplicates
                ]
            )
        kind = self.host.profile(team.coordinator).kind
        if kind != "llm":
            raise invalid_params(
                [
                    {
                        "loc": ["team", "coordinator"],
                        "msg": f'the coordinator "{team.coordinator}" must be an llm profile, '
                        f"not {kind}",
                    }
                ]
            )
        run = self.runs.new(request.runId, None, "oma/runTeam", session)
        roster = self._roster(team.agents, run.run_id)
        (coordinator,) = self._roster([team.coordinator], run.run_id).values()

        async def start(progress: ProgressCallback, ask: PermissionHandler) -> TeamRunResult:
            return await self.orchestrator.run_team(
                Team(agents=roster, coordinator=coordinator),
                request.goal,
                run_id=run.run_id,
                on_progress=progress,
                permission_handler=ask,
                meta=request.meta,
            )

        return await self._serve(session, run, start, [], request.onDisconnect)

    def _roster(self, names: Iterable[str], run_id: str) -> dict[str, AgentConfig]:
        """Each named profile's config, as ``oma/runAgent`` builds it, in first-use order."""
        host = self.host
        return {
            name: agent_config(
                name, host.profile(name), host.settings, None, {RUN_ID_LABEL: run_id}
            )
            for name in dict.fromkeys(names)
        }

    async def _serve(
        self,
        session: Session,
        run: LiveRun,
        start: _Start,
        planned: list[PlannedTask],
        on_disconnect: str,
        *,
        event: Callable[[dict[str, Any]], dict[str, Any]] = lambda event: event,
    ) -> dict[str, Any]:
        """Run the team as one run of the daemon; answer its ``TeamRunResult``.

        ``event`` rewrites each ``oma/progress`` event (worktree members).
        """
        run_id = run.run_id
        outcome: list[TeamRunResult] = []
        send = progress_sender(session, run_id)

        async def progress(raw: dict[str, Any]) -> None:
            await send(event(raw))

        async def execute() -> AgentRunResult:
            # Permission requests of ACP members go to the calling connection.
            result = await start(progress, self.remote.permission_handler(session, None))
            outcome.append(result)
            return _summary(result)

        run.cancel = lambda: self.orchestrator.cancel(run_id)
        await self.runs.serve(run, None, execute, detach=on_disconnect == "continue")
        # No outcome: cancelled while it waited for a slot, so nothing ran.
        result = outcome[0] if outcome else _never_started(run_id, planned)
        return result.to_wire()


def _text_only(check: Callable[[Any], None], value: Any) -> None:
    try:
        check(value)
    except InvalidMessageError as error:
        raise invalid_message(error) from None


def _summary(result: TeamRunResult) -> AgentRunResult:
    """The team run as one run of the daemon (``run/result``, the run bookkeeping)."""
    return AgentRunResult(
        run_id=result.run_id,
        success=result.success,
        output=result.output,
        token_usage=result.token_usage,
        status=result.status,
    )


def _never_started(run_id: str, planned: list[PlannedTask]) -> TeamRunResult:
    """A run cancelled while queued: every task skipped, as the library says it."""
    control = RunControl()
    control.cancel()  # the library's own words for a cancelled run and its skipped tasks
    tasks = [
        TeamTask(
            task.id,
            task.title,
            task.assignee,
            task.spec.description,
            task.depends_on,
            status="skipped",
            reason=control.skip_reason,
        )
        for task in planned
    ]
    message = control.stop_message or ""
    return TeamRunResult(
        run_id=run_id,
        success=False,
        output=combined_output(tasks) if tasks else message,
        tasks=tasks,
        token_usage=TokenUsage(),
        status=RunStatus("cancelled", message),
    )
