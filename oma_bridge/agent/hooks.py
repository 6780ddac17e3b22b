"""The ``beforeRun`` / ``afterRun`` application rules of open-multi-agent.

``apply_before_run`` implements the rules of the reference (section 7) in
order: snapshot, the external-backend check, the prompt type check, messages
replacing the input, then a prompt rewrite compared against the *original*
``ctx.prompt``.  ``ensure_outcome`` is OMA's ``ensureAgentOutcome``: the last
word on ``success`` after ``afterRun``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from oma_bridge.agent.input import boundary_messages_error
from oma_bridge.callbacks import invoke
from oma_bridge.errors import InvalidMessageError
from oma_bridge.messages import LLMMessage, checked_copy, copy_messages, last_user_text
from oma_bridge.results import AgentRunResult, ErrorInfo, RunStatus

__all__ = [
    "apply_after_run",
    "apply_before_run",
    "before_run_context",
    "ensure_outcome",
    "rewrite_last_user_prompt",
]


def before_run_context(
    messages: list[LLMMessage], agent: Any, run_id: str | None = None
) -> dict[str, Any]:
    """``{prompt, messages, agent, runId}``: the hook sees copies, never the run's own lists.

    ``runId`` (an addition to open-multi-agent's context) tells a hook which
    run it serves, as the daemon's ``hook/beforeRun`` must say.
    """
    return {
        "prompt": last_user_text(messages, ""),
        "messages": copy_messages(messages),
        "agent": agent,
        "runId": run_id,
    }


async def apply_before_run(
    hook: Callable[[Any], Any],
    messages: list[LLMMessage],
    *,
    agent: Any,
    external_kind: str | None,
    run_id: str | None = None,
) -> list[LLMMessage]:
    """Run a ``beforeRun`` hook and return the input the backend should see.

    ``external_kind`` is ``"process"`` / ``"acp"`` for text-only backends.
    Raises :class:`InvalidMessageError` (or whatever the hook raised) on a
    failure; the caller turns that into a failed result of kind ``callback``.
    """
    context = before_run_context(messages, agent, run_id)
    original_prompt = context["prompt"]
    snapshot = copy_messages(context["messages"])  # rule 1, before the hook can touch it
    answer = await invoke(hook, context)
    if not isinstance(answer, Mapping):
        raise InvalidMessageError(
            f"beforeRun must return an object with a string prompt, got {type(answer).__name__}"
        )
    returned = answer.get("messages")
    if returned is not None and external_kind is not None:  # rule 2
        try:
            unchanged = copy_messages(returned) == snapshot
        except InvalidMessageError:
            unchanged = False
        if not unchanged:
            raise boundary_messages_error(external_kind)
    prompt = answer.get("prompt")
    if not isinstance(prompt, str):  # rule 3
        raise InvalidMessageError("beforeRun.prompt must be a string")
    result = messages
    if returned is not None:  # rule 4
        result = checked_copy(returned)
    if prompt != original_prompt:  # rule 5
        result = rewrite_last_user_prompt(result, prompt)
    return result


def rewrite_last_user_prompt(messages: list[LLMMessage], prompt: str) -> list[LLMMessage]:
    """Put ``prompt`` into the last user message (rule 5 of the reference).

    The first text block's place takes one new text block, the other text
    blocks go, non-text blocks keep their order; with no text block the
    prompt is prepended; with no user message nothing changes.
    """
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message["role"] != "user":
            continue
        blocks: list[Any] = []
        placed = False
        for block in message["content"]:
            if block.get("type") == "text":
                if not placed:
                    blocks.append({"type": "text", "text": prompt})
                    placed = True
                continue
            blocks.append(block)
        if not placed:
            blocks.insert(0, {"type": "text", "text": prompt})
        rewritten = list(messages)
        rewritten[index] = {"role": "user", "content": blocks}
        return rewritten
    return messages


async def apply_after_run(hook: Callable[[Any], Any], result: AgentRunResult) -> AgentRunResult:
    """Run an ``afterRun`` hook; its return value replaces the result."""
    answer = await invoke(hook, result)
    if not isinstance(answer, AgentRunResult):
        raise InvalidMessageError(
            f"afterRun must return an AgentRunResult, got {type(answer).__name__}"
        )
    return answer


def ensure_outcome(result: AgentRunResult) -> AgentRunResult:
    """Make ``success`` agree with ``status`` (OMA's ``ensureAgentOutcome``).

    A budget overrun always wins; ``success: True`` with a non-ok status
    becomes ``ok`` and drops ``errorInfo``; ``success: False`` with an ok (or
    no) status becomes ``error`` carrying the output as its message.
    """
    if result.budget_exceeded:
        if result.status.code != "budget_exhausted":
            result.status = RunStatus("budget_exhausted", result.status.message or result.output)
        if result.error_info is None:
            result.error_info = ErrorInfo(kind="budget", code="TOKEN_BUDGET_EXCEEDED")
    elif result.success and result.status.code != "ok":
        result.status = RunStatus("ok")
        result.error_info = None
    elif not result.success and result.status.code == "ok":
        result.status = RunStatus("error", result.output)
    result.success = result.status.code == "ok"
    return result
