"""A turn's outcome: the agent's ``session/prompt`` answer and the turn's updates, as a result."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from oma_bridge.backends import BackendOutcome
from oma_bridge.backends.acp.schema import PromptResponse
from oma_bridge.backends.acp.turn import Turn
from oma_bridge.errors import RefusedError
from oma_bridge.results import TokenUsage

__all__ = ["outcome_of"]

logger = logging.getLogger(__name__)


def outcome_of(answer: Any, turn: Turn, *, input_tokens: int, label: str) -> BackendOutcome:
    """The outcome of a turn the agent answered with ``answer``.

    ``refusal`` keeps the output and fails the run; ``max_tokens`` and
    ``max_turn_requests`` exceed the budget; ``cancelled`` is a cancel; an
    unknown stop reason (or a malformed answer) is taken as ``end_turn``.
    """
    try:
        stop_reason = PromptResponse.model_validate(answer).stop_reason
    except ValidationError:
        logger.warning("ACP agent %s: malformed session/prompt answer", label)
        stop_reason = "end_turn"
    output = turn.output
    outcome = BackendOutcome(
        output=output,
        messages=[{"role": "assistant", "content": [{"type": "text", "text": output}]}]
        if output
        else [],
        token_usage=TokenUsage(input_tokens=input_tokens),
        tool_calls=turn.tool_calls,
    )
    if stop_reason == "refusal":
        message = f'ACP agent "{label}" refused the task'
        outcome.error = RefusedError(f"{message}: {output}" if output else f"{message}.")
    elif stop_reason in ("max_tokens", "max_turn_requests"):
        outcome.budget_exceeded = True
    elif stop_reason == "cancelled":
        outcome.cancelled = True
    elif stop_reason != "end_turn":
        logger.warning("ACP agent %s: unknown stop reason %r", label, stop_reason)
    return outcome
