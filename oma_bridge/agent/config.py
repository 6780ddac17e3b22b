"""``AgentConfig``: one agent's configuration, its backend one of the three kinds."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

from oma_bridge.backends import BackendConfig
from oma_bridge.backends.acp.config import AcpConfig
from oma_bridge.backends.llm.config import LLM_KEYS, LlmConfig
from oma_bridge.backends.process.config import ProcessConfig
from oma_bridge.messages import LLMMessage, checked_copy, copy_messages

__all__ = ["AfterRunHook", "AgentConfig", "BackendConfigs", "BeforeRunHook", "smallest_ceiling"]

#: ``before_run(ctx) -> ctx`` where ctx is ``{"prompt", "messages", "agent"}``.
BeforeRunHook: TypeAlias = Callable[[dict[str, Any]], Any | Awaitable[Any]]
#: ``after_run(result) -> result`` with an ``AgentRunResult``.
AfterRunHook: TypeAlias = Callable[[Any], Any | Awaitable[Any]]

#: The built-in kinds, told apart by ``kind`` (how TOML and wire data become configs).
BackendConfigs: TypeAlias = Annotated[
    LlmConfig | ProcessConfig | AcpConfig, Field(discriminator="kind")
]
_BACKEND_DATA: TypeAdapter[LlmConfig | ProcessConfig | AcpConfig] = TypeAdapter(BackendConfigs)


class AgentConfig(BaseModel):
    """The configuration of one agent; frozen once built.

    ``backend`` says what runs the agent's turns: an :class:`LlmConfig`
    (the default), a :class:`ProcessConfig` or an :class:`AcpConfig`, given
    as a model or as data with its ``kind``; any other object that follows
    the :class:`~oma_bridge.backends.BackendConfig` protocol plugs in too.
    The LLM keys (``provider``, ``model``, ``base_url``, ``api_key_env``,
    ``max_tokens``, ``temperature``, ``call_timeout_ms``, ``tools``) are also
    taken at the top level, as open-multi-agent takes them:
    ``AgentConfig(provider="echo", model="echo-1")``.  An invalid ``history``
    raises :class:`~oma_bridge.errors.InvalidMessageError` at construction.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, extra="forbid")

    name: str = "agent"
    description: str | None = None
    system_prompt: str | None = None
    history: tuple[Any, ...] = ()
    max_turns: int = Field(default=10, ge=1)
    max_token_budget: int | None = Field(default=None, ge=0)
    timeout_ms: int | None = Field(default=None, gt=0)
    before_run: BeforeRunHook | None = None
    after_run: AfterRunHook | None = None
    backend: BackendConfig = Field(default_factory=LlmConfig)

    @model_validator(mode="before")
    @classmethod
    def _llm_keys_into_backend(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        llm = {key: data[key] for key in LLM_KEYS if key in data}
        backend = data.get("backend")
        if isinstance(backend, dict):
            backend = _BACKEND_DATA.validate_python(backend)
        if llm:
            if backend is None:
                backend = LlmConfig(**llm)
            elif isinstance(backend, LlmConfig):
                # Built anew, not model_copy(update=): that skips validation, and a
                # top-level "temperature": "hot" would reach the provider.
                backend = type(backend)(**{**dict(backend), **llm})
            else:
                raise ValueError(
                    f"{', '.join(sorted(llm))}: keys of an llm agent, "
                    f"but this agent's backend is of kind {backend.kind!r}"
                )
        rest = {key: value for key, value in data.items() if key not in LLM_KEYS}
        if backend is not None:
            rest["backend"] = backend
        return rest

    @field_validator("history", mode="before")
    @classmethod
    def _guard_history(cls, value: Any) -> tuple[Any, ...]:
        if value is None:
            return ()
        return tuple(checked_copy(value))

    @property
    def kind(self) -> str:
        """``"llm"``, ``"process"`` or ``"acp"`` (or a plug-in backend's own kind)."""
        return self.backend.kind

    def history_messages(self) -> list[LLMMessage]:
        """An independent copy of the seeded history."""
        return copy_messages(self.history)


def smallest_ceiling(*ceilings: int | None) -> int | None:
    """The ceiling that applies when several are set (a run's, its agent's, a team's):
    the smallest wins, so a narrower one never widens a limit; ``None`` when none is set."""
    present = [ceiling for ceiling in ceilings if ceiling is not None]
    return min(present) if present else None
