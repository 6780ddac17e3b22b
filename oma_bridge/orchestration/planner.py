"""Reading the coordinator's plan: JSON out of its answer, then the same checks as tasks.

:func:`read_plan` answers the tasks, or the list of what is wrong with the
answer, for the correction round's message and, after it, the run's
failure message (docs/teams.md, "run_team").
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

import orjson

from oma_bridge.errors import TaskGraphError
from oma_bridge.orchestration.tasks import TASK_KEYS, PlannedTask, TaskSpec, plan_tasks

__all__ = ["PLAN_KEYS", "extract_json", "read_plan"]

#: A plan's task objects take the task keys except ``id`` (ids are the run's to give).
PLAN_KEYS = TASK_KEYS - {"id"}

_FENCE = re.compile(r"```(?:json)?\s*\n?(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_json(text: str) -> Any:
    """The JSON in a model's answer, as the reference looks for it.

    The whole text, then the first Markdown code fence, then the span from
    the first ``{`` to the last ``}``, then from the first ``[`` to the last
    ``]``.  Raises ``ValueError`` when none parses.
    """
    candidates = [text.strip()]
    fence = _FENCE.search(text)
    if fence:
        candidates.append(fence.group(1).strip())
    for opening, closing in (("{", "}"), ("[", "]")):
        start, end = text.find(opening), text.rfind(closing)
        if 0 <= start < end:
            candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            return orjson.loads(candidate)
        except orjson.JSONDecodeError:
            continue
    raise ValueError("The response contains no valid JSON.")


def read_plan(text: str, roster: Collection[str]) -> tuple[list[PlannedTask], list[str]]:
    """The planned tasks of the coordinator's answer and the issues found in it.

    Either the tasks (and no issues) or the issues (and no tasks).
    """
    try:
        plan = extract_json(text)
    except ValueError as error:
        return [], [str(error)]
    if not isinstance(plan, list) or not plan:
        return [], ["The plan must be a non-empty JSON array of task objects."]
    issues: list[str] = []
    specs: list[object] = []
    for index, item in enumerate(plan):
        problems = _item_problems(item, index)
        issues += problems
        if not problems:
            specs.append(TaskSpec.from_wire(item))
    if issues:
        return [], issues
    try:
        return plan_tasks(specs, roster), []
    except TaskGraphError as error:
        return [], error.issues


def _item_problems(item: object, index: int) -> list[str]:
    """What the task checks would not say of a plan item: its keys and text fields."""
    if not isinstance(item, dict):
        return [f"tasks[{index}] must be a JSON object."]
    problems = []
    unknown = sorted(key for key in item if key not in PLAN_KEYS)
    if unknown:
        problems.append(f"tasks[{index}] has unknown keys: {', '.join(unknown)}.")
    for key in ("title", "description", "assignee"):
        value = item.get(key)
        if not isinstance(value, str) or not value.strip():
            problems.append(f"tasks[{index}].{key} must be a non-empty string.")
    return problems
