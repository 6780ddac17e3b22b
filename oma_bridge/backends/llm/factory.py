"""The provider factory: an ``LlmConfig``'s provider keys -> its adapter.

It takes the keys, not the config: ``config.py`` imports this module (at
the first run, see ``create_llm_backend``), so this one cannot import it.
"""

from __future__ import annotations

from oma_bridge.backends.llm.anthropic import AnthropicAdapter
from oma_bridge.backends.llm.echo import EchoAdapter
from oma_bridge.backends.llm.http import ApiKey, ProviderHTTP, RetryPolicy
from oma_bridge.backends.llm.openai import OpenAIAdapter
from oma_bridge.backends.llm.types import (
    LLMAdapter,
)
from oma_bridge.errors import ProviderError
from oma_bridge.provider_keys import DEFAULT_KEY_ENV, required_key_variable

__all__ = ["DEFAULT_CALL_TIMEOUT_MS", "PROVIDERS", "create_adapter"]

PROVIDERS = ("anthropic", "openai", "echo")
#: Per-call timeout (and longest stall of a stream) when ``call_timeout_ms`` is unset.
DEFAULT_CALL_TIMEOUT_MS = 120_000

_LABELS = {"anthropic": "Anthropic", "openai": "OpenAI-compatible"}


def create_adapter(
    provider: str | None,
    *,
    model: str | None,
    base_url: str | None,
    api_key_env: str | None,
    call_timeout_ms: int | None,
    agent_name: str,
    retry: RetryPolicy | None = None,
) -> LLMAdapter:
    """The adapter of ``provider`` (an ``LlmConfig``'s keys); ``ProviderError`` on a bad config."""
    provider = provider or "anthropic"
    if provider == "echo":
        return EchoAdapter()
    if provider not in _LABELS:
        raise ProviderError(
            f'Agent "{agent_name}": unknown provider {provider!r} '
            f"(provider must be one of {', '.join(PROVIDERS)})"
        )
    if not model:
        raise ProviderError(
            f'Agent "{agent_name}": provider {provider!r} needs a model (model is not set)',
            provider=provider,
        )
    variable = required_key_variable(provider, api_key_env, base_url)
    key = ApiKey(
        env_var=variable or api_key_env or DEFAULT_KEY_ENV[provider],
        agent_name=agent_name,
        required=variable is not None,
    )
    http = ProviderHTTP(
        provider,
        label=_LABELS[provider],
        key=key,
        call_timeout_s=(call_timeout_ms or DEFAULT_CALL_TIMEOUT_MS) / 1000,
        retry=retry or RetryPolicy(),
    )
    if provider == "anthropic":
        return AnthropicAdapter(http, base_url)
    return OpenAIAdapter(http, base_url)
