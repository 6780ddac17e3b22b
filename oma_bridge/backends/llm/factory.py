"""The provider factory: :class:`LlmConfig` -> adapter -> :class:`LLMBackend`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oma_bridge.backends.llm.anthropic import AnthropicAdapter
from oma_bridge.backends.llm.backend import LLMBackend
from oma_bridge.backends.llm.echo import EchoAdapter
from oma_bridge.backends.llm.http import ApiKey, ProviderHTTP, RetryPolicy
from oma_bridge.backends.llm.openai import OpenAIAdapter
from oma_bridge.backends.llm.types import (
    LLMAdapter,
)
from oma_bridge.errors import ProviderError
from oma_bridge.provider_keys import DEFAULT_KEY_ENV

if TYPE_CHECKING:
    from oma_bridge.backends.llm.config import LlmConfig

__all__ = ["DEFAULT_CALL_TIMEOUT_MS", "PROVIDERS", "create_adapter", "create_llm_backend"]

PROVIDERS = ("anthropic", "openai", "echo")
#: Per-call timeout (and longest stall of a stream) when ``call_timeout_ms`` is unset.
DEFAULT_CALL_TIMEOUT_MS = 120_000

_LABELS = {"anthropic": "Anthropic", "openai": "OpenAI-compatible"}


def create_adapter(
    config: LlmConfig, *, agent_name: str, retry: RetryPolicy | None = None
) -> LLMAdapter:
    """The provider adapter ``config`` names; raises :class:`ProviderError` on a bad config."""
    provider = config.provider or "anthropic"
    if provider == "echo":
        return EchoAdapter()
    if provider not in _LABELS:
        raise ProviderError(
            f'Agent "{agent_name}": unknown provider {provider!r} '
            f"(provider must be one of {', '.join(PROVIDERS)})"
        )
    if not config.model:
        raise ProviderError(
            f'Agent "{agent_name}": provider {provider!r} needs a model (model is not set)',
            provider=provider,
        )
    key = ApiKey(
        env_var=config.api_key_env or DEFAULT_KEY_ENV[provider],
        agent_name=agent_name,
        required=provider == "anthropic" or bool(config.api_key_env) or not config.base_url,
    )
    http = ProviderHTTP(
        provider,
        label=_LABELS[provider],
        key=key,
        call_timeout_s=(config.call_timeout_ms or DEFAULT_CALL_TIMEOUT_MS) / 1000,
        retry=retry or RetryPolicy(),
    )
    if provider == "anthropic":
        return AnthropicAdapter(http, config.base_url)
    return OpenAIAdapter(http, config.base_url)


def create_llm_backend(
    config: LlmConfig, *, agent_name: str, retry: RetryPolicy | None = None
) -> LLMBackend:
    """The backend of an LLM agent.

    ``retry`` overrides the default :class:`RetryPolicy` (tests use short delays).
    """
    return LLMBackend(
        create_adapter(config, agent_name=agent_name, retry=retry),
        model=config.model or "echo-1",
        tools=config.tools,
        max_tokens=config.max_tokens,
        temperature=config.temperature,
    )
