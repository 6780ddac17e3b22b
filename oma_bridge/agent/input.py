"""The one place where input enters an agent: the shape guard, the text-only boundary, the copy.

In that order: a malformed input gets the guard's error first; structured
input for a text-only (process, ACP) agent is refused before any hook,
state change or spawn; what passes is copied, so nothing the caller keeps
can change what the run sees.
"""

from __future__ import annotations

from typing import Generic, TypeVar

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
    "Prepared",
    "PreparedInput",
    "PreparedPrompt",
    "boundary_messages_error",
    "boundary_structured_error",
    "prepare",
    "prepare_prompt",
    "prepare_prompt_input",
    "prepare_run_input",
    "text_only_kind",
]

_Value = TypeVar("_Value")


class Prepared(Generic[_Value]):
    """Input taken in once, ahead of its run: guarded, boundary-checked and copied.

    Made by :meth:`Agent.prepare` (for ``run`` / ``stream``) or
    :meth:`Agent.prepare_prompt` (for ``prompt``), so that a caller can refuse
    bad input early (the daemon answers -32010 before it queues the run) and
    hand the result over without the work being done again.  It is handed
    over, not shared: a run takes its value, and a second run of the same
    one raises ``RuntimeError``.
    """

    __slots__ = ("_value", "prompt", "taken")

    def __init__(self, value: _Value, prompt: str | None) -> None:
        self._value = value
        #: The input as given when it was a string; ``None`` for structured input.
        self.prompt = prompt
        self.taken = False

    @property
    def value(self) -> _Value:
        """The prepared messages (or user turn), to read; the run takes them as they are."""
        return self._value

    def check(self, kind: BackendKind | None) -> None:
        """Raise unless a run of an agent whose text-only kind is ``kind`` may take it.

        ``kind`` is ``None`` for an llm agent.  Structured input prepared for
        an llm agent meets the text-only boundary here, so input prepared for
        one agent cannot slip past it on another.
        """
        if self.taken:
            raise RuntimeError("a prepared input serves one run: prepare it again")
        if kind is not None and self.prompt is None:
            raise boundary_structured_error(kind)

    def take(self, kind: BackendKind | None) -> _Value:
        """The value, once, after :meth:`check`."""
        self.check(kind)
        self.taken = True
        return self._value


class PreparedInput(Prepared[list[LLMMessage]]):
    """``run`` / ``stream`` input, prepared: its messages."""

    __slots__ = ()


class PreparedPrompt(Prepared[LLMMessage]):
    """``prompt`` input, prepared: the user turn."""

    __slots__ = ()


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


def prepare(run_input: object, config: AgentConfig) -> PreparedInput:
    """:func:`prepare_run_input` as a value to hand to ``run`` or ``stream``."""
    messages = prepare_run_input(run_input, config)
    return PreparedInput(messages, run_input if isinstance(run_input, str) else None)


def prepare_prompt(prompt_input: object, config: AgentConfig) -> PreparedPrompt:
    """:func:`prepare_prompt_input` as a value to hand to ``prompt``."""
    turn = prepare_prompt_input(prompt_input, config)
    return PreparedPrompt(turn, prompt_input if isinstance(prompt_input, str) else None)
