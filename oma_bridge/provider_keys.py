"""Where each LLM provider's API key is read from when a config names none.

Its own module so that the daemon can tell its secrets at start-up without
importing the provider adapters (and httpx) before any LLM agent runs.
"""

from __future__ import annotations

__all__ = ["DEFAULT_KEY_ENV"]

#: The variable a provider's key is read from when ``api_key_env`` is unset.
DEFAULT_KEY_ENV: dict[str, str] = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
