"""The one place where input enters an agent: the shape guard, the text-only boundary, the copy.

In that order: a malformed input gets the guard's error first; structured
input for a text-only (process, ACP) agent is refused before any hook,
state change or spawn; what passes is copied, so nothing the caller keeps
can change what the run sees.
"""

from __future__ import annotations

from oma_bridge.agent.config import AgentConfig
from oma_bridge.backends import BackendKind, text_only
from oma_bridge.errors import InvalidMessageError
from oma_bridge.messages import (
    LLMMessage,
    checked_copy,
    text_message,
    validate_content_blocks,
    validate_messages,
)

__all__ = [
    "boundary_messages_error",
    "boundary_structured_error",
    "prepare_prompt_input",
    "prepare_run_input",
    "text_only_kind",
]


def boundary_structured_error(kind: str) -> InvalidMessageError:
    """Structured input for a text-only (process / ACP) backend."""
    return InvalidMessageError(
        f"The {kind} external backend accepts string prompts only; structured messages or "
        "content blocks cannot be forwarded without loss."
    )


def boundary_messages_error(kind: str) -> InvalidMessageError:
    """A ``beforeRun`` that changed ``messages`` for a text-only backend."""
    return InvalidMessageError(
        f"The {kind} external backend accepts beforeRun.prompt rewrites only; "
        "beforeRun.messages cannot be forwarded without loss."
    )


def text_only_kind(config: AgentConfig) -> BackendKind | None:
    """The kind of a text-only agent, ``None`` for an llm one."""
    kind = config.backend.kind
    return kind if text_only(kind) else None


def prepare_run_input(run_input: object, config: AgentConfig) -> list[LLMMessage]:
    """Guard, boundary check and copy of ``run``/``stream`` input, in that order.

    The one place where input enters (``Agent`` uses it; the daemon and the
    orchestrator call it at request time, so that bad input is refused
    before anything is queued, observed or spawned).
    """
    if isinstance(run_input, str):
        return [text_message(run_input)]
    kind = text_only_kind(config)
    if kind is not None:
        validate_messages(run_input)  # a guard error comes before the boundary's
        raise boundary_structured_error(kind)
    return checked_copy(run_input)


def prepare_prompt_input(prompt_input: object, config: AgentConfig) -> LLMMessage:
    """The same for ``prompt`` input: one user message."""
    if isinstance(prompt_input, str):
        return text_message(prompt_input)
    kind = text_only_kind(config)
    if kind is not None:
        validate_content_blocks(prompt_input)  # a guard error comes before the boundary's
        raise boundary_structured_error(kind)
    # Guarded and copied inside its message, as validate_content_blocks does, so
    # that a refusal names messages[0].content[j]...
    turn: LLMMessage = {"role": "user", "content": prompt_input}  # type: ignore[typeddict-item]
    return checked_copy([turn])[0]  # type: ignore[no-any-return]
