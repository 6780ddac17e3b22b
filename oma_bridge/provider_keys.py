"""Where each LLM provider's API key is read from, and the key variables the daemon knows.

Its own module so that the daemon can tell its secrets at start-up without
importing the provider adapters (and httpx) before any LLM agent runs.
"""

from __future__ import annotations

import os

__all__ = [
    "DEFAULT_KEY_ENV",
    "KNOWN_KEY_VARIABLES",
    "in_the_daemon",
    "key_fix",
    "key_not_set",
    "missing_key",
    "required_key_variable",
]

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


#: How messages name the environment the keys are read from, and the fix:
#: this process's, which :func:`in_the_daemon` renames (PROTOCOL §18.3: the
#: variable must be set where the daemon starts, not in the client's shell).
_environment = ["this process's environment", ""]


def in_the_daemon() -> None:
    """This process is the daemon: say so in every missing-key message (``run_daemon`` calls it)."""
    _environment[:] = [
        "the daemon's environment",
        "; set it where the daemon starts (under systemd: `systemctl --user edit oma-bridge`, "
        "Environment=) and restart the daemon",
    ]


def key_fix() -> str:
    """What to do about a key that is not set, to follow :func:`key_not_set` (or nothing)."""
    return _environment[1]


def required_key_variable(
    provider: str | None, api_key_env: str | None, base_url: str | None
) -> str | None:
    """The variable an LLM profile's key must be read from, ``None`` when it needs none.

    Anthropic always needs one; an OpenAI-compatible provider unless it has a
    ``base_url`` and no ``api_key_env`` (a local server: Ollama, vLLM); echo never.
    """
    provider = provider or "anthropic"
    if provider not in DEFAULT_KEY_ENV:
        return None
    if provider == "anthropic" or api_key_env or not base_url:
        return api_key_env or DEFAULT_KEY_ENV[provider]
    return None


def key_not_set(variable: str) -> str:
    """Why a profile cannot run: ``ANTHROPIC_API_KEY is not set in the daemon's environment``."""
    return f"{variable} is not set in {_environment[0]}"


def missing_key(provider: str | None, api_key_env: str | None, base_url: str | None) -> str | None:
    """:func:`key_not_set` of the profile's key variable when it is needed and unset (or empty)."""
    variable = required_key_variable(provider, api_key_env, base_url)
    if variable is None or os.environ.get(variable):
        return None
    return key_not_set(variable)
