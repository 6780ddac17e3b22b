"""The event-driven scheduler of a team run: a task starts as soon as it can.

A task is admitted when every dependency completed, its assignee is free
(a member works on one task at a time, as in the reference) and fewer than
``max_concurrency`` tasks run; admission happens whenever a task settles,
so nothing waits for a whole "wave".  Each admitted task is a child of one
anyio task group.  A failed task skips its dependents transitively; a stop
(the caller's cancel, an exhausted budget) admits nothing more, and what
never started is skipped once the running tasks have settled.  Events and
their order: docs/teams.md ("Progress events").
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeAlias

import anyio
import anyio.abc

from oma_bridge.agent import Agent
from oma_bridge.orchestration.outcome import TeamTask, TeamTaskStatus
from oma_bridge.orchestration.prompts import task_prompt
from oma_bridge.orchestration.tasks import PlannedTask
from oma_bridge.results import AgentRunResult, StatusCode, TokenUsage

__all__ = ["RunAttempt", "RunControl", "Scheduler", "TaskEmit"]

#: Runs one attempt of a task with its prompt: ``(task, prompt, attempt) -> result``.
RunAttempt: TypeAlias = Callable[[TeamTask, str, int], Awaitable[AgentRunResult]]
#: Sends one task event: ``(type, task, data)``.
TaskEmit: TypeAlias = Callable[[str, TeamTask, dict[str, Any]], Awaitable[None]]

#: The longest pause between two attempts, as in the reference.
MAX_RETRY_DELAY_S = 30.0
#: Kinds of failure that a retry cannot mend, for results whose error did not say.
_TERMINAL_KINDS = frozenset({"callback", "budget", "cancelled"})


class RunControl:
    """How a team run is stopped, shared by its scheduler and its runs.

    ``cancel()`` is the caller's cancel: it stops admission and cancels
    every live run through its agent (so each ends with a ``cancelled``
    result and its processes are ended).  ``stop()`` is an exhausted budget:
    admission stops, running tasks finish.  ``live`` maps a key (a task id,
    or a coordinator phase) to the agent and run id running it now.
    """

    def __init__(self) -> None:
        self.cancel_requested = False
        self.stop_code: StatusCode | None = None
        self.stop_message: str | None = None
        self.stopped = anyio.Event()
        self.live: dict[str, tuple[Agent, str]] = {}
        self.finished = False

    @property
    def skip_reason(self) -> str:
        if self.cancel_requested:
            return "Skipped: run aborted."
        return self.stop_message or "Skipped: the run stopped."

    def stop(self, code: StatusCode, message: str) -> None:
        if self.stop_code is None:
            self.stop_code, self.stop_message = code, message
        self.stopped.set()

    def cancel(self) -> bool:
        """Cancel the run; ``False`` once it has ended."""
        if self.finished:
            return False
        self.cancel_requested = True
        self.stop("cancelled", "Run cancelled by caller.")
        for agent, run_id in list(self.live.values()):
            agent.cancel(run_id)
        return True


def retryable(result: AgentRunResult) -> bool:
    """Whether another attempt may succeed (``is_retryable`` of the run's error)."""
    info = result.error_info
    if info is None:
        return True
    if info.retryable is not None:
        return info.retryable
    return info.kind not in _TERMINAL_KINDS


def retry_delay(planned: PlannedTask, attempt: int) -> float:
    """Seconds before attempt ``attempt + 1``: backoff, capped, jittered into [½, 1]×."""
    spec = planned.spec
    base = min(spec.retry_delay_ms / 1000 * spec.retry_backoff ** (attempt - 1), MAX_RETRY_DELAY_S)
    return base * random.uniform(0.5, 1.0)


class Scheduler:
    """Runs the planned tasks of one team run (see the module docstring)."""

    def __init__(
        self,
        planned: list[PlannedTask],
        tasks: dict[str, TeamTask],
        *,
        run_attempt: RunAttempt,
        emit: TaskEmit,
        control: RunControl,
        max_concurrency: int,
    ) -> None:
        self.planned = {task.id: task for task in planned}
        self.tasks = tasks
        self.run_attempt = run_attempt
        self.emit = emit
        self.control = control
        self.limit = max_concurrency
        self.busy: set[str] = set()
        self.running = 0
        # The reference's default order among ready tasks: most transitive
        # dependents first, then plan order.
        weight = _dependent_counts(planned)
        self.order = sorted(planned, key=lambda task: (-weight[task.id], task.index))
        self._group: anyio.abc.TaskGroup | None = None

    async def run(self) -> None:
        """Run until every task has settled; what never started ends ``skipped``."""
        async with anyio.create_task_group() as group:
            self._group = group
            self._admit()
        for planned in sorted(self.planned.values(), key=lambda task: task.index):
            task = self.tasks[planned.id]
            if task.status == "pending":
                task.status, task.reason = "skipped", self.control.skip_reason
                await self.emit("task_skipped", task, _skipped_data(task))

    def _admit(self) -> None:
        if self.control.stop_code is not None or self._group is None:
            return
        for planned in self.order:
            if self.running >= self.limit:
                return
            task = self.tasks[planned.id]
            if task.status != "pending" or task.assignee in self.busy:
                continue
            if all(self.tasks[dep].status == "completed" for dep in planned.depends_on):
                task.status = "running"
                self.busy.add(task.assignee)
                self.running += 1
                self._group.start_soon(self._work, planned, task)

    async def _work(self, planned: PlannedTask, task: TeamTask) -> None:
        task.started_at = time.time()
        await self.emit("task_start", task, {**_identity(task), "dependsOn": list(task.depends_on)})
        prompt = task_prompt(task.title, task.description, [self.tasks[d] for d in task.depends_on])
        result = await self._attempts(planned, task, prompt)
        task.ended_at = time.time()
        task.result = result
        status: TeamTaskStatus = "completed" if result.success else "failed"
        if not result.success and self.control.cancel_requested:
            status = "cancelled"
        # Announced before the task counts as settled, so that a dependent's
        # task_start never precedes this task's end.
        if status == "completed":
            await self.emit(
                "task_complete",
                task,
                {**_identity(task), "status": status, "output": result.output},
            )
        else:
            error = result.status.message or result.output
            await self.emit(
                "task_failed", task, {**_identity(task), "status": status, "error": error}
            )
        task.status = status
        self.busy.discard(task.assignee)
        self.running -= 1
        for skipped in self._cascade(task) if status == "failed" else []:
            await self.emit("task_skipped", skipped, _skipped_data(skipped))
        self._admit()

    async def _attempts(self, planned: PlannedTask, task: TeamTask, prompt: str) -> AgentRunResult:
        """Run until success, a terminal failure, a stop, or the last attempt."""
        attempts = planned.spec.max_retries + 1
        usage = TokenUsage()
        for attempt in range(1, attempts + 1):
            task.attempts = attempt
            result = await self.run_attempt(task, prompt, attempt)
            usage.add(result.token_usage)
            if result.success or attempt == attempts or not retryable(result):
                break
            if self.control.stop_code is not None:
                break
            delay = retry_delay(planned, attempt)
            await self.emit(
                "task_retry",
                task,
                {
                    "taskId": task.id,
                    "attempt": attempt,
                    "maxAttempts": attempts,
                    "error": result.status.message or result.output,
                    "nextDelayMs": round(delay * 1000),
                },
            )
            with anyio.move_on_after(delay):
                await self.control.stopped.wait()
            if self.control.stop_code is not None:
                break
        return result if task.attempts == 1 else replace(result, token_usage=usage)

    def _cascade(self, failed: TeamTask) -> list[TeamTask]:
        """Skip every pending task downstream of ``failed``, in plan order, transitively."""
        skipped: list[TeamTask] = []
        frontier = [failed]
        plan = sorted(self.planned.values(), key=lambda task: task.index)
        while frontier:
            source = frontier.pop(0)
            verb = "failed" if source.status == "failed" else "was skipped"
            for planned in plan:
                task = self.tasks[planned.id]
                if task.status == "pending" and source.id in planned.depends_on:
                    task.status = "skipped"
                    task.reason = f'Skipped: dependency "{source.title}" {verb}.'
                    skipped.append(task)
                    frontier.append(task)
        return skipped


def _identity(task: TeamTask) -> dict[str, Any]:
    return {"taskId": task.id, "title": task.title, "assignee": task.assignee}


def _skipped_data(task: TeamTask) -> dict[str, Any]:
    return {**_identity(task), "status": "skipped", "reason": task.reason}


def _dependent_counts(planned: list[PlannedTask]) -> dict[str, int]:
    """How many tasks depend on each task, directly or not."""
    dependents: dict[str, set[str]] = {task.id: set() for task in planned}
    for task in planned:
        for dep in task.depends_on:
            dependents[dep].add(task.id)
    counts: dict[str, int] = {}
    for task in planned:
        seen: set[str] = set()
        stack = list(dependents[task.id])
        while stack:
            node = stack.pop()
            if node not in seen:
                seen.add(node)
                stack.extend(dependents[node])
        counts[task.id] = len(seen)
    return counts
