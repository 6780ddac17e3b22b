"""``AgentConfig``: the LLM keys taken at the top level are validated as the backend's own."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from oma_bridge.agent import AgentConfig
from oma_bridge.backends.llm.config import LlmConfig
from oma_bridge.tools import ToolDefinition


def test_top_level_llm_keys_over_a_given_backend_are_validated() -> None:
    with pytest.raises(ValidationError) as info:
        AgentConfig(backend=LlmConfig(provider="echo"), temperature="hot", max_tokens=-5)
    failed = {error["loc"][-1] for error in info.value.errors()}
    assert {"temperature", "max_tokens"} <= failed


def test_top_level_llm_keys_update_a_given_backend_and_keep_the_rest() -> None:
    tool = ToolDefinition(name="t", execute=lambda _input: "ok")
    backend = LlmConfig(provider="echo", tools=(tool,), max_tokens=10)
    config = AgentConfig(backend=backend, temperature=0.5)
    assert isinstance(config.backend, LlmConfig)
    assert config.backend.temperature == 0.5
    assert config.backend.max_tokens == 10
    assert config.backend.tools == (tool,)
    assert backend.temperature is None  # the given model is left as it was
