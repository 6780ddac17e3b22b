"""What a team run produces: :class:`TeamTask` per task, :class:`TeamRunResult` for the run.

``to_wire()`` gives docs/contract.md §15's shapes; the library-only fields
(``status``, ``reason``, timings, the coordinator's results) stay off the
wire.  How ``output`` is combined is in docs/teams.md ("The result").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from oma_bridge.results import AgentRunResult, RunStatus, TokenUsage

__all__ = [
    "OUTPUT_SEPARATOR",
    "TeamRunResult",
    "TeamTask",
    "TeamTaskStatus",
    "combined_output",
    "problem_sections",
    "tasks_status",
]

#: A team task's status (``TeamTask.status`` on the wire); not anyio's ``TaskStatus``.
TeamTaskStatus: TypeAlias = Literal[
    "pending", "running", "completed", "failed", "skipped", "cancelled"
]

#: Between the outputs of several tasks: the reference's merge separator.
OUTPUT_SEPARATOR = "\n\n---\n\n"


@dataclass
class TeamTask:
    """One task of a team run and how it ended.

    ``result`` is the last attempt's :class:`AgentRunResult` (its usage
    summed over the attempts); a task that never ran has none, and
    ``reason`` says why (``Skipped: dependency "A" failed.``).
    ``started_at`` / ``ended_at`` are ``time.time()`` stamps of the first
    attempt's start and the last attempt's end.
    """

    id: str
    title: str
    assignee: str
    description: str
    depends_on: tuple[str, ...] = ()
    status: TeamTaskStatus = "pending"
    result: AgentRunResult | None = None
    reason: str | None = None
    attempts: int = 0
    started_at: float | None = None
    ended_at: float | None = None

    @property
    def finished(self) -> bool:
        return self.status not in ("pending", "running")

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "id": self.id,
            "title": self.title,
            "assignee": self.assignee,
            "status": self.status,
        }
        if self.result is not None:
            wire["result"] = self.result.to_wire()
        return wire


@dataclass
class TeamRunResult:
    """The outcome of ``run_tasks`` / ``run_team``.

    ``success`` is true exactly when ``status.code == "ok"``: every task
    completed (and, for ``run_team``, the synthesis too).  ``token_usage``
    sums every run the team made, the coordinator's included.
    ``coordinator`` holds the coordinator's runs of a ``run_team``
    (decomposition, the correction round if any, synthesis), in order.
    """

    run_id: str
    success: bool
    output: str
    tasks: list[TeamTask] = field(default_factory=list)
    token_usage: TokenUsage = field(default_factory=TokenUsage)
    status: RunStatus = field(default_factory=RunStatus)
    coordinator: list[AgentRunResult] = field(default_factory=list)

    def task(self, title_or_id: str) -> TeamTask:
        """The task with this id, or else this title; ``KeyError`` if none."""
        for task in self.tasks:
            if task.id == title_or_id:
                return task
        for task in self.tasks:
            if task.title == title_or_id:
                return task
        raise KeyError(title_or_id)

    def to_wire(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "success": self.success,
            "output": self.output,
            "tasks": [task.to_wire() for task in self.tasks],
            "tokenUsage": self.token_usage.to_wire(),
        }


def problem_sections(tasks: Sequence[TeamTask]) -> list[str]:
    """The lines on tasks that did not complete, in the synthesis prompt's layout.

    ``## Failed Tasks`` / ``## Skipped Tasks`` as the reference's synthesis
    prompt has them (docs/teams.md), and ``## Cancelled Tasks`` for a
    cancelled run (which the reference has no status for).  Each present
    section is preceded by a blank line.
    """
    lines: list[str] = []
    for status, heading, label, prefix in _SECTIONS:
        chosen = [task for task in tasks if task.status == status]
        if not chosen:
            continue
        lines += ["", heading]
        for task in chosen:
            lines += [f"### {task.title} ({label})", f"{prefix}: {_why(task)}"]
    return lines


_SECTIONS = (
    ("failed", "## Failed Tasks", "FAILED", "Error"),
    ("skipped", "## Skipped Tasks", "SKIPPED", "Reason"),
    ("cancelled", "## Cancelled Tasks", "CANCELLED", "Reason"),
)


def _why(task: TeamTask) -> str:
    if task.result is not None and task.status != "skipped":
        return task.result.status.message or task.result.output or "unknown error"
    return task.reason or "unknown reason"


def combined_output(tasks: Sequence[TeamTask]) -> str:
    """The outputs of the completed tasks nothing depends on, then what went wrong.

    Sink outputs (non-empty, plan order) are joined with the reference's
    ``\\n\\n---\\n\\n``; tasks that did not complete follow in the synthesis
    prompt's ``## Failed Tasks`` / ``## Skipped Tasks`` layout.
    """
    needed = {dep for task in tasks for dep in task.depends_on}
    outputs = [
        task.result.output
        for task in tasks
        if task.id not in needed
        and task.status == "completed"
        and task.result is not None
        and task.result.output
    ]
    text = OUTPUT_SEPARATOR.join(outputs)
    problems = problem_sections(tasks)
    if not problems:
        return text
    return "\n".join([text, *problems]) if text else "\n".join(problems[1:])


def tasks_status(tasks: Sequence[TeamTask]) -> RunStatus:
    """``ok`` when every task completed, else ``error`` naming the failures."""
    if all(task.status == "completed" for task in tasks):
        return RunStatus("ok")
    failed = [task for task in tasks if task.status == "failed"]
    skipped = sum(task.status == "skipped" for task in tasks)
    parts = []
    for task in failed:
        assert task.result is not None
        parts.append(
            f'Task "{task.title}" failed: {task.result.status.message or task.result.output}'
        )
    if skipped:
        parts.append(f"{skipped} task(s) skipped")
    return RunStatus("error", "; ".join(parts) or "Some tasks did not complete.")
