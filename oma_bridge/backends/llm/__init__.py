"""LLM-backed agents: providers, the model/tool loop, and the factory.

:func:`create_llm_backend` turns an :class:`LlmConfig` into an
:class:`LLMBackend` over the adapter its ``provider`` names:

* ``"anthropic"`` (also when ``provider`` is unset, as in OMA): the Messages
  API; the key comes from ``api_key_env`` (default ``ANTHROPIC_API_KEY``).
* ``"openai"``: Chat Completions at ``base_url`` (default OpenAI's); the key
  comes from ``api_key_env`` (default ``OPENAI_API_KEY``).  With a custom
  ``base_url`` and no ``api_key_env``, the key is optional: local servers
  (Ollama, vLLM, llama.cpp) take requests without ``Authorization``.
* ``"echo"``: offline and deterministic (``docs/protocol.md``, "The echo
  provider"); no key, no model.

Configuration mistakes known before any call (an unknown provider, a missing
``model``) raise :class:`~oma_bridge.errors.ProviderError` from the factory,
naming the agent and the field.  The key is read from the environment at each
call, so a missing key fails that run (a ``ProviderError`` naming the
variable, never a value) and setting the variable later heals the agent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oma_bridge._lazy import lazy_attributes

if TYPE_CHECKING:
    from oma_bridge.backends.llm.anthropic import AnthropicAdapter
    from oma_bridge.backends.llm.backend import LLMBackend
    from oma_bridge.backends.llm.config import LlmConfig, create_llm_backend
    from oma_bridge.backends.llm.echo import EchoAdapter
    from oma_bridge.backends.llm.factory import DEFAULT_CALL_TIMEOUT_MS, PROVIDERS, create_adapter
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
    "LlmConfig",
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

# Names resolve on first use: an agent's config can be built, and the package
# imported, without httpx and the provider adapters (PEP 562).
_HOMES = {
    "AnthropicAdapter": "oma_bridge.backends.llm.anthropic",
    "ApiKey": "oma_bridge.backends.llm.http",
    "ChatRequest": "oma_bridge.backends.llm.types",
    "ChatResponse": "oma_bridge.backends.llm.types",
    "DEFAULT_CALL_TIMEOUT_MS": "oma_bridge.backends.llm.factory",
    "EchoAdapter": "oma_bridge.backends.llm.echo",
    "LLMAdapter": "oma_bridge.backends.llm.types",
    "LLMBackend": "oma_bridge.backends.llm.backend",
    "LlmConfig": "oma_bridge.backends.llm.config",
    "OpenAIAdapter": "oma_bridge.backends.llm.openai",
    "PROVIDERS": "oma_bridge.backends.llm.factory",
    "ProviderHTTP": "oma_bridge.backends.llm.http",
    "ReasoningDelta": "oma_bridge.backends.llm.types",
    "RetryPolicy": "oma_bridge.backends.llm.http",
    "StreamDelta": "oma_bridge.backends.llm.types",
    "TextDelta": "oma_bridge.backends.llm.types",
    "ToolSpec": "oma_bridge.backends.llm.types",
    "ToolUseDelta": "oma_bridge.backends.llm.types",
    "TurnEnd": "oma_bridge.backends.llm.types",
    "create_adapter": "oma_bridge.backends.llm.factory",
    "create_llm_backend": "oma_bridge.backends.llm.config",
}


__getattr__ = lazy_attributes(__name__, _HOMES)
