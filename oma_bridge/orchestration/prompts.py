"""The texts a team run sends: task prompts, the coordinator's prompts, synthesis.

The layouts are the reference's (docs/teams.md, "Prompt layouts"): lines
joined with ``"\\n"``, dependency outputs under ``## Context from
prerequisite tasks``, the synthesis prompt's sections in plan order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from oma_bridge.orchestration.outcome import TeamTask, problem_sections

__all__ = [
    "Member",
    "coordinator_system_prompt",
    "decomposition_prompt",
    "repair_prompt",
    "synthesis_prompt",
    "task_prompt",
]

#: The reference's bound on a member's role summary in the roster.
ROLE_SUMMARY_MAX_CHARS = 140


@dataclass(frozen=True)
class Member:
    """What the coordinator is told of one team member."""

    name: str
    kind: str
    description: str | None = None
    system_prompt: str | None = None

    def manifest(self) -> dict[str, str]:
        """``{"name", "kind", "roleSummary"?}``; the summary is the description,
        else the system prompt's first line, at most 140 characters."""
        entry = {"name": self.name, "kind": self.kind}
        source = self.description
        if source is None and self.system_prompt:
            source = self.system_prompt.splitlines()[0] if self.system_prompt.strip() else None
        summary = (source or "").strip()[:ROLE_SUMMARY_MAX_CHARS]
        if summary:
            entry["roleSummary"] = summary
        return entry


def task_prompt(title: str, description: str, dependencies: Sequence[TeamTask]) -> str:
    """A task's prompt: its title and description, then its dependencies' outputs.

    ``dependencies`` are the direct ones in ``dependsOn`` order; only
    completed ones with a non-empty output are laid in, and with none the
    context block is left out.
    """
    lines = [f"# Task: {title}", "", description]
    context = [
        task
        for task in dependencies
        if task.status == "completed" and task.result is not None and task.result.output
    ]
    if context:
        lines += ["", "## Context from prerequisite tasks", ""]
        for task in context:
            assert task.result is not None
            lines += [f"### {task.title} (by {task.assignee or 'unknown'})", task.result.output]
    return "\n".join(lines)


_PREAMBLE = (
    "You coordinate a team: you break a high-level goal down into concrete tasks",
    "and give each task to the team member best suited to it.",
)

_OUTPUT_FORMAT = (
    "## Output Format",
    "When asked to decompose a goal, answer ONLY with a JSON array of task objects.",
    "Each task object has:",
    '  - "title":       a short title, unique within the plan (string)',
    '  - "description": what to do, with the context and the expected output (string)',
    '  - "assignee":    the name of one member of the roster above (string)',
    '  - "dependsOn":   the titles of the tasks whose output this task needs'
    " (string[], may be empty)",
    '  - "maxRetries":  (optional) how many times to retry the task after a failure (integer)',
    "",
    "## Dependency Guidance",
    "Give each task only the upstream tasks its assignee really needs as input:",
    "every extra dependency costs parallelism and tokens. When unsure, prefer fewer.",
    "",
    "Return only the JSON array. Do not use Markdown code fences or extra text.",
)

_SYNTHESIS_GUIDANCE = (
    "## When synthesising results",
    "You will then be given the outputs of the tasks and asked for a final answer.",
    "Write a clear, complete answer to the original goal.",
)

#: The JSON Schema of a plan, shown as the reference shows its output schema.
PLAN_SCHEMA = {
    "type": "array",
    "minItems": 1,
    "items": {
        "type": "object",
        "additionalProperties": False,
        "required": ["title", "description", "assignee"],
        "properties": {
            "title": {"type": "string", "minLength": 1},
            "description": {"type": "string", "minLength": 1},
            "assignee": {"type": "string", "minLength": 1},
            "dependsOn": {"type": "array", "items": {"type": "string"}},
            "maxRetries": {"type": "integer", "minimum": 0},
        },
    },
}


def coordinator_system_prompt(members: Sequence[Member], own: str | None = None) -> str:
    """The coordinator's system prompt; ``own`` (its configured one) replaces the preamble."""
    roster = orjson.dumps([m.manifest() for m in members], option=orjson.OPT_INDENT_2).decode()
    preamble = [own] if own and own.strip() else list(_PREAMBLE)
    return "\n".join(
        [
            *preamble,
            "",
            "## Team Roster",
            "These are all the members you may assign tasks to (roleSummary is a short",
            "summary of each member's role, at most 140 characters):",
            roster,
            "",
            *_OUTPUT_FORMAT,
            "",
            *_SYNTHESIS_GUIDANCE,
            "",
            "## Output Format (REQUIRED)",
            orjson.dumps(PLAN_SCHEMA, option=orjson.OPT_INDENT_2).decode(),
        ]
    )


def decomposition_prompt(goal: str, members: Sequence[Member]) -> str:
    names = ", ".join(member.name for member in members)
    return "\n".join(
        [
            f"Decompose the following goal into tasks for your team ({names}).",
            "",
            "## Goal",
            goal,
            "",
            "Return ONLY the JSON task array. Do not use a Markdown code fence.",
        ]
    )


def repair_prompt(issues: Sequence[str]) -> str:
    """The correction round's user turn, after a plan that did not validate."""
    return "\n".join(
        [
            "Your previous response did not produce valid JSON matching the required schema.",
            "",
            f"Error: {' '.join(issues)}",
            "",
            "Please try again. Respond with ONLY valid JSON, no other text.",
        ]
    )


def synthesis_prompt(goal: str, tasks: Sequence[TeamTask]) -> str:
    """Every completed task's output (plan order), then the failed and skipped ones."""
    results = []
    for task in tasks:
        if task.status == "completed" and task.result is not None:
            results += [
                f"### {task.title} (completed by {task.assignee})",
                task.result.output or "(no output)",
            ]
    return "\n".join(
        [
            "## Original Goal",
            goal,
            "",
            "## Task Results",
            *results,
            *problem_sections([task for task in tasks if task.status != "cancelled"]),
            "",
            "## Your Task",
            "Synthesise the above results into a comprehensive final answer that addresses"
            " the original goal.",
            "If some tasks failed or were skipped, note any gaps in the result.",
        ]
    )
