"""The task model of team runs and its validation, done before anything runs.

:class:`TaskSpec` is what a caller (or the coordinator's plan) asks for;
:func:`plan_tasks` checks a list of them against the roster and returns
:class:`PlannedTask` objects with ids and resolved dependencies, or raises.
The checks follow docs/teams.md ("Validation"): the text-only rule first
(:class:`~oma_bridge.errors.InvalidMessageError`), then every shape and graph
problem at once (:class:`~oma_bridge.errors.TaskGraphError`), so that a
caller, or a coordinator in its correction round, sees all of them.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oma_bridge.errors import InvalidMessageError, TaskGraphError

__all__ = [
    "TASK_KEYS",
    "PlannedTask",
    "TaskSpec",
    "check_goal_text",
    "check_text_only",
    "plan_tasks",
]

#: The keys of a task given as a mapping (the wire's camelCase).
TASK_KEYS = frozenset(
    {
        "id",
        "title",
        "description",
        "assignee",
        "dependsOn",
        "maxRetries",
        "retryDelayMs",
        "retryBackoff",
    }
)


@dataclass(frozen=True)
class TaskSpec:
    """One task of a team run.

    ``depends_on`` names other tasks by id or by title (trimmed, compared
    case-insensitively); an id matches first.  ``max_retries`` more attempts
    are made after a retryable failure, ``retry_delay_ms`` ×
    ``retry_backoff``^(n-1) apart (at most 30 s, jittered into [½, 1]×).
    Without ``id`` the run gives the task a fresh one.
    """

    title: str
    description: str
    assignee: str
    depends_on: tuple[str, ...] = ()
    id: str | None = None
    max_retries: int = 0
    retry_delay_ms: float = 1000.0
    retry_backoff: float = 2.0

    @classmethod
    def from_wire(cls, task: Mapping[str, Any]) -> TaskSpec:
        """A task from its wire mapping, unchecked (:func:`plan_tasks` checks it)."""
        return cls(
            title=task.get("title"),  # type: ignore[arg-type]
            description=task.get("description"),  # type: ignore[arg-type]
            assignee=task.get("assignee"),  # type: ignore[arg-type]
            depends_on=task.get("dependsOn", ()),
            id=task.get("id"),
            max_retries=task.get("maxRetries", 0),
            retry_delay_ms=task.get("retryDelayMs", 1000.0),
            retry_backoff=task.get("retryBackoff", 2.0),
        )

    def to_wire(self) -> dict[str, Any]:
        """The task as its wire mapping (``oma/runTasks``, docs/contract.md §15); ``id`` if set."""
        wire: dict[str, Any] = {
            "title": self.title,
            "description": self.description,
            "assignee": self.assignee,
            "dependsOn": list(self.depends_on),
            "maxRetries": self.max_retries,
            "retryDelayMs": self.retry_delay_ms,
            "retryBackoff": self.retry_backoff,
        }
        if self.id is not None:
            wire["id"] = self.id
        return wire


@dataclass(frozen=True)
class PlannedTask:
    """A checked task: its id, and its dependencies as ids in ``depends_on`` order."""

    index: int
    id: str
    spec: TaskSpec
    depends_on: tuple[str, ...]

    @property
    def title(self) -> str:
        return self.spec.title

    @property
    def assignee(self) -> str:
        return self.spec.assignee


def check_text_only(tasks: Sequence[object]) -> None:
    """Team runs are text only: a description that is no string raises.

    :class:`InvalidMessageError` (the daemon's -32010), naming the task; run
    before anything else, so nothing has been opened, sent or spawned.
    """
    for index, task in enumerate(tasks):
        description = _get(task, "description")
        if description is not None and not isinstance(description, str):
            raise InvalidMessageError(
                f"{_label(task, index)}: description must be a string "
                f"(got {type(description).__name__}); team runs are text-only, structured "
                "messages or content blocks cannot be forwarded to team members",
                path=f"tasks[{index}].description",
            )


def check_goal_text(goal: object) -> None:
    """``run_team``'s goal is text only: anything but a ``str`` raises.

    :class:`InvalidMessageError` (the daemon's -32010) with ``path`` ``goal``,
    checked before anything is opened, sent or spawned.
    """
    if not isinstance(goal, str):
        raise InvalidMessageError(
            f"goal must be a string (got {type(goal).__name__}); team runs are text-only, "
            "structured messages or content blocks cannot be forwarded to team members",
            path="goal",
        )


def plan_tasks(tasks: Sequence[object], roster: Collection[str]) -> list[PlannedTask]:
    """Check ``tasks`` (:class:`TaskSpec` or wire mappings) and resolve them.

    Raises :class:`InvalidMessageError` for a description that is no string,
    then :class:`TaskGraphError` listing every other problem: a bad shape,
    a duplicate title or id, an unknown or ambiguous ``dependsOn``, a
    self-dependency, a cycle, a missing or unknown assignee.
    """
    if isinstance(tasks, str | bytes | Mapping) or not isinstance(tasks, Sequence):
        raise TaskGraphError([f"tasks must be a list, got {type(tasks).__name__}."], [])
    check_text_only(tasks)
    issues = _Issues()
    specs = [_spec(task, index, issues) for index, task in enumerate(tasks)]
    valid = [(index, spec) for index, spec in enumerate(specs) if spec is not None]
    ids = _assign_ids(valid, issues)
    by_id = {ids[index]: index for index, _ in valid}
    by_title = _titles(valid, issues)
    planned = []
    for index, spec in valid:
        _check_assignee(spec, roster, issues)
        deps = tuple(_resolve(ref, spec, by_id, by_title, issues) for ref in spec.depends_on)
        resolved = tuple(dict.fromkeys(ids[dep] for dep in deps if dep is not None))
        planned.append(PlannedTask(index, ids[index], spec, resolved))
    _check_cycles(planned, issues)
    issues.raise_if_any()
    return planned


class _Issues:
    def __init__(self) -> None:
        self.messages: list[str] = []
        self.tasks: list[str] = []

    def add(self, task: str, message: str) -> None:
        self.messages.append(message)
        if task not in self.tasks:
            self.tasks.append(task)

    def raise_if_any(self) -> None:
        if self.messages:
            raise TaskGraphError(self.messages, self.tasks)


def _get(task: object, key: str) -> Any:
    if isinstance(task, TaskSpec):
        return task.description if key == "description" else task.title
    return task.get(key) if isinstance(task, Mapping) else None


def _label(task: object, index: int) -> str:
    title = _get(task, "title")
    return f'Task "{title}"' if isinstance(title, str) and title.strip() else f"tasks[{index}]"


def _spec(task: object, index: int, issues: _Issues) -> TaskSpec | None:
    """The task as a TaskSpec, or None (with issues) when its shape is wrong."""
    if isinstance(task, Mapping):
        unknown = sorted(str(key) for key in task if key not in TASK_KEYS)
        if unknown:
            issues.add(
                _label(task, index),
                f"{_label(task, index)} has unknown keys: {', '.join(unknown)}.",
            )
            return None
        task = TaskSpec.from_wire(task)
    if not isinstance(task, TaskSpec):
        issues.add(
            f"tasks[{index}]",
            f"tasks[{index}] must be a TaskSpec or an object, got {type(task).__name__}.",
        )
        return None
    label = _label(task, index)
    problems = _shape_problems(task)
    for problem in problems:
        issues.add(label, f"{label}: {problem}.")
    if problems:
        return None
    return TaskSpec(
        title=task.title.strip(),
        description=task.description,
        assignee=task.assignee,
        depends_on=tuple(task.depends_on),
        id=task.id,
        max_retries=task.max_retries,
        retry_delay_ms=float(task.retry_delay_ms),
        retry_backoff=float(task.retry_backoff),
    )


def _shape_problems(task: TaskSpec) -> list[str]:
    problems = []
    if not isinstance(task.title, str) or not task.title.strip():
        problems.append("title must be a non-empty string")
    if task.assignee is None:
        problems.append("has no assignee")
    elif not isinstance(task.assignee, str):
        problems.append("assignee must be a string (an agent's name)")
    if task.id is not None and (not isinstance(task.id, str) or not task.id):
        problems.append("id must be a non-empty string")
    deps = task.depends_on
    if isinstance(deps, str) or not isinstance(deps, Sequence):
        problems.append("dependsOn must be a list of task titles or ids")
    elif not all(isinstance(dep, str) for dep in deps):
        problems.append("dependsOn must hold strings only")
    if not _is_int(task.max_retries) or task.max_retries < 0:
        problems.append("maxRetries must be an integer >= 0")
    if not _is_number(task.retry_delay_ms) or task.retry_delay_ms < 0:
        problems.append("retryDelayMs must be a number >= 0")
    if not _is_number(task.retry_backoff) or task.retry_backoff <= 0:
        problems.append("retryBackoff must be a number > 0")
    return problems


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)  # type: ignore[arg-type]


def _normal(title: str) -> str:
    return title.strip().lower()


def _assign_ids(valid: list[tuple[int, TaskSpec]], issues: _Issues) -> dict[int, str]:
    ids: dict[int, str] = {}
    seen: dict[str, TaskSpec] = {}
    for index, spec in valid:
        if spec.id is None:
            ids[index] = str(uuid.uuid4())
            continue
        first = seen.setdefault(spec.id, spec)
        if first is not spec:
            issues.add(
                f'Task "{spec.title}"',
                f'Duplicate task id "{spec.id}" (tasks "{first.title}" and "{spec.title}").',
            )
        ids[index] = spec.id
    return ids


def _titles(valid: list[tuple[int, TaskSpec]], issues: _Issues) -> dict[str, int]:
    by_title: dict[str, int] = {}
    for index, spec in valid:
        key = _normal(spec.title)
        if key in by_title:
            first = by_title[key]
            issues.add(
                f'Task "{spec.title}"',
                f'Duplicate task title "{spec.title}" (tasks[{first}] and tasks[{index}]).',
            )
        else:
            by_title[key] = index
    return by_title


def _check_assignee(spec: TaskSpec, roster: Collection[str], issues: _Issues) -> None:
    if spec.assignee not in roster:
        names = ", ".join(sorted(roster)) or "none"
        issues.add(
            f'Task "{spec.title}"',
            f'Task "{spec.title}" is assigned to unknown agent "{spec.assignee}" (team: {names}).',
        )


def _resolve(
    ref: str, spec: TaskSpec, by_id: dict[str, int], by_title: dict[str, int], issues: _Issues
) -> int | None:
    index = by_id.get(ref)
    if index is None:
        index = by_title.get(_normal(ref))
    if index is None:
        issues.add(f'Task "{spec.title}"', f'Task "{spec.title}" depends on unknown task "{ref}".')
    return index


def _check_cycles(planned: list[PlannedTask], issues: _Issues) -> None:
    """Self-dependencies and cycles, each cycle named once by its titles."""
    by_id = {task.id: task for task in planned}
    done: set[str] = set()
    for task in planned:
        if task.id in task.depends_on:
            issues.add(f'Task "{task.title}"', f'Task "{task.title}" depends on itself.')
    for root in planned:
        if root.id in done:
            continue
        path: list[str] = []
        on_path: set[str] = set()
        # An explicit stack: a deep chain of tasks must not hit Python's recursion limit.
        stack: list[tuple[str, int]] = [(root.id, 0)]
        while stack:
            node, next_dep = stack.pop()
            if next_dep == 0:
                path.append(node)
                on_path.add(node)
            deps = [dep for dep in by_id[node].depends_on if dep != node]
            if next_dep < len(deps):
                stack.append((node, next_dep + 1))
                dep = deps[next_dep]
                if dep in on_path:
                    cycle = [*path[path.index(dep) :], dep]
                    titles = " -> ".join(f'"{by_id[step].title}"' for step in cycle)
                    issues.add(
                        f'Task "{by_id[dep].title}"', f"Cyclic dependency detected: {titles}."
                    )
                elif dep not in done:
                    stack.append((dep, 0))
                continue
            path.pop()
            on_path.discard(node)
            done.add(node)
