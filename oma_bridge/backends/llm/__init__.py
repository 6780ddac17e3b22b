"""LLM-backed agents: providers, the model/tool loop, and the factory.

:func:`create_llm_backend` turns an :class:`~oma_bridge.agent.AgentConfig`
into an :class:`LLMBackend` over the adapter its ``provider`` names:

* ``"anthropic"`` (also when ``provider`` is unset, as in OMA): the Messages
  API; the key comes from ``api_key_env`` (default ``ANTHROPIC_API_KEY``).
* ``"openai"``: Chat Completions at ``base_url`` (default OpenAI's); the key
  comes from ``api_key_env`` (default ``OPENAI_API_KEY``).  With a custom
  ``base_url`` and no ``api_key_env``, the key is optional: local servers
  (Ollama, vLLM, llama.cpp) take requests without ``Authorization``.
* ``"echo"``: offline and deterministic (PROTOCOL.md §10); no key, no model.

Configuration mistakes known before any call (an unknown provider, a missing
``model``) raise :class:`~oma_bridge.errors.ProviderError` from the factory,
naming the agent and the field.  The key is read from the environment at each
call, so a missing key fails that run (a ``ProviderError`` naming the
variable, never a value) and setting the variable later heals the agent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oma_bridge.backends.llm.anthropic import AnthropicAdapter
from oma_bridge.backends.llm.backend import LLMBackend
from oma_bridge.backends.llm.echo import EchoAdapter
from oma_bridge.backends.llm.http import ApiKey, ProviderHTTP, RetryPolicy
from oma_bridge.backends.llm.openai import OpenAIAdapter
from oma_bridge.backends.llm.types import (
    ChatRequest,
    ChatResponse,
    LLMAdapter,
    ReasoningDelta,
    StreamDelta,
    TextDelta,
    ToolSpec,
    ToolUseDelta,
    TurnEnd,
)
from oma_bridge.errors import ProviderError
from oma_bridge.provider_keys import DEFAULT_KEY_ENV

if TYPE_CHECKING:
    from oma_bridge.agent import AgentConfig

__all__ = [
    "DEFAULT_CALL_TIMEOUT_MS",
    "PROVIDERS",
    "AnthropicAdapter",
    "ApiKey",
    "ChatRequest",
    "ChatResponse",
    "EchoAdapter",
    "LLMAdapter",
    "LLMBackend",
    "OpenAIAdapter",
    "ProviderHTTP",
    "ReasoningDelta",
    "RetryPolicy",
    "StreamDelta",
    "TextDelta",
    "ToolSpec",
    "ToolUseDelta",
    "TurnEnd",
    "create_adapter",
    "create_llm_backend",
]

PROVIDERS = ("anthropic", "openai", "echo")
#: Per-call timeout (and longest stall of a stream) when ``call_timeout_ms`` is unset.
DEFAULT_CALL_TIMEOUT_MS = 120_000

_LABELS = {"anthropic": "Anthropic", "openai": "OpenAI-compatible"}


def create_adapter(config: AgentConfig, *, retry: RetryPolicy | None = None) -> LLMAdapter:
    """The provider adapter ``config`` names; raises :class:`ProviderError` on a bad config."""
    provider = config.provider or "anthropic"
    if provider == "echo":
        return EchoAdapter()
    if provider not in _LABELS:
        raise ProviderError(
            f'Agent "{config.name}": unknown provider {provider!r} '
            f"(provider must be one of {', '.join(PROVIDERS)})"
        )
    if not config.model:
        raise ProviderError(
            f'Agent "{config.name}": provider {provider!r} needs a model (model is not set)',
            provider=provider,
        )
    key = ApiKey(
        env_var=config.api_key_env or DEFAULT_KEY_ENV[provider],
        agent_name=config.name,
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


def create_llm_backend(config: AgentConfig, *, retry: RetryPolicy | None = None) -> LLMBackend:
    """The backend of an LLM agent (``config.backend is None``).

    ``retry`` overrides the default :class:`RetryPolicy` (tests use short delays).
    """
    return LLMBackend(
        create_adapter(config, retry=retry),
        model=config.model or "echo-1",
        tools=config.tools,
        max_tokens=config.max_tokens,
        temperature=config.temperature,
    )
