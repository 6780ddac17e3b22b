"""Agents: ``AgentConfig`` and ``Agent`` (run / stream / prompt / history)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .backend import BackendConfig
from .messages import LLMMessage, copy_messages, validate_messages
from .tools import ToolDefinition

__all__ = ["AfterRunHook", "AgentConfig", "BeforeRunHook"]

#: ``before_run(ctx) -> ctx`` where ctx is ``{"prompt", "messages", "agent"}``.
BeforeRunHook: TypeAlias = Callable[[dict[str, Any]], Any | Awaitable[Any]]
#: ``after_run(result) -> result`` with an ``AgentRunResult``.
AfterRunHook: TypeAlias = Callable[[Any], Any | Awaitable[Any]]


class AgentConfig(BaseModel):
    """The configuration of one agent; frozen once built.

    ``backend`` is ``None`` for an LLM-backed agent, else the config of an
    external backend (process or ACP).  An invalid ``history`` raises
    :class:`~oma_bridge.errors.InvalidMessageError` at construction.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, extra="forbid")

    name: str = "agent"
    description: str | None = None
    model: str | None = None
    provider: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    system_prompt: str | None = None
    history: tuple[Any, ...] = ()
    max_turns: int = Field(default=10, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_token_budget: int | None = Field(default=None, ge=0)
    timeout_ms: int | None = Field(default=None, gt=0)
    call_timeout_ms: int | None = Field(default=None, gt=0)
    temperature: float | None = None
    tools: tuple[ToolDefinition, ...] = ()
    before_run: BeforeRunHook | None = None
    after_run: AfterRunHook | None = None
    backend: BackendConfig | None = None

    @field_validator("history", mode="before")
    @classmethod
    def _guard_history(cls, value: Any) -> tuple[Any, ...]:
        if value is None:
            return ()
        validate_messages(value)
        return tuple(copy_messages(value))

    def history_messages(self) -> list[LLMMessage]:
        """An independent copy of the seeded history."""
        return copy_messages(self.history)
