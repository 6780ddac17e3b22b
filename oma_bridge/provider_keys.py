"""Where each LLM provider's API key is read from, and the key variables the daemon knows.

Its own module so that the daemon can tell its secrets at start-up without
importing the provider adapters (and httpx) before any LLM agent runs.
"""

from __future__ import annotations

__all__ = ["DEFAULT_KEY_ENV", "KNOWN_KEY_VARIABLES"]

#: The variable a provider's key is read from when ``api_key_env`` is unset.
DEFAULT_KEY_ENV: dict[str, str] = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}

#: Variables that hold a model provider's key or token wherever they are set:
#: the two above, the other hosted model APIs, and the ones the coding
#: agents served over ACP read (Claude Code, Codex, Gemini CLI, Bedrock).
#: Their values are blanked out of everything the daemon writes or answers
#: (:mod:`oma_bridge.redaction`), whether or not a profile names them.
KNOWN_KEY_VARIABLES: frozenset[str] = frozenset(
    {
        *DEFAULT_KEY_ENV.values(),
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "OPENAI_ADMIN_KEY",
        "AZURE_OPENAI_API_KEY",
        "CODEX_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "MISTRAL_API_KEY",
        "GROQ_API_KEY",
        "DEEPSEEK_API_KEY",
        "XAI_API_KEY",
        "OPENROUTER_API_KEY",
        "TOGETHER_API_KEY",
        "FIREWORKS_API_KEY",
        "COHERE_API_KEY",
        "PERPLEXITY_API_KEY",
        "HF_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_BEARER_TOKEN_BEDROCK",
    }
)
