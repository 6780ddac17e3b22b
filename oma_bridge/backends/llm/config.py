"""``LlmConfig``: the ``backend`` of an agent that calls a model provider."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

from oma_bridge.tools import ToolDefinition

if TYPE_CHECKING:
    from oma_bridge.backends.llm.backend import LLMBackend
    from oma_bridge.backends.llm.http import RetryPolicy

__all__ = ["LLM_KEYS", "LlmConfig", "LlmSettings", "create_llm_backend"]


class LlmSettings(BaseModel):
    """The keys of an LLM agent that its user chooses (a daemon profile's too).

    The scalar types are strict, as for every backend (a TOML ``"0.5"`` is
    not a number).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["llm"] = "llm"
    provider: StrictStr | None = None
    model: StrictStr | None = None
    base_url: StrictStr | None = Field(default=None, min_length=1)
    api_key_env: StrictStr | None = Field(default=None, min_length=1)
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    temperature: StrictFloat | None = Field(default=None, ge=0)
    #: Per-call timeout (and longest stall of a stream), in milliseconds.
    call_timeout_ms: StrictInt | None = Field(default=None, gt=0)


class LlmConfig(LlmSettings):
    """Which provider and model an LLM agent calls, and how.

    ``provider`` unset means Anthropic, as in open-multi-agent; ``"echo"`` is
    the offline provider of ``docs/protocol.md`` ("The echo provider") and
    needs no model.  Nothing here is read until the first run, so a config
    can be built without network, key or httpx.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    #: Tools the model may call (code, not settings: no profile sets them).
    tools: tuple[ToolDefinition, ...] = ()

    def create(self, *, agent_name: str, retry: RetryPolicy | None = None) -> LLMBackend:
        """The live backend; raises ``ProviderError`` for a provider or model it cannot use."""
        return create_llm_backend(self, agent_name=agent_name, retry=retry)

    def check(self, agent_name: str) -> None:
        """``ValueError`` for a config that could never run: no model, provider not echo."""
        if self.model is None and self.provider != "echo":
            raise ValueError(f'Agent "{agent_name}" needs a model (or a backend)')


def create_llm_backend(
    config: LlmConfig, *, agent_name: str, retry: RetryPolicy | None = None
) -> LLMBackend:
    """The backend of an LLM agent: the model/tool loop over the adapter ``provider`` names.

    ``retry`` overrides the default ``RetryPolicy`` (tests use short delays).
    The loop and the adapters are imported here, at the first run, so that
    building configs never pulls httpx in; neither imports this module.
    """
    from oma_bridge.backends.llm.backend import LLMBackend
    from oma_bridge.backends.llm.factory import create_adapter

    adapter = create_adapter(
        config.provider,
        model=config.model,
        base_url=config.base_url,
        api_key_env=config.api_key_env,
        call_timeout_ms=config.call_timeout_ms,
        agent_name=agent_name,
        retry=retry,
    )
    return LLMBackend(
        adapter,
        model=config.model or "echo-1",
        tools=config.tools,
        max_tokens=config.max_tokens,
        temperature=config.temperature,
    )


#: The keys of :class:`LlmConfig` that ``AgentConfig`` also takes at its top
#: level (``AgentConfig(provider="echo", model="echo-1")``).
LLM_KEYS: frozenset[str] = frozenset(LlmConfig.model_fields) - {"kind"}
