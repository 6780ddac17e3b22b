"""Fixtures of the team tests: an OpenAI-compatible server on 127.0.0.1 for coordinators."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

# The fake provider lives with the LLM tests, which import it by module name.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "llm"))

from fake_llm_provider import FakeProvider


@pytest.fixture
async def openai_server() -> AsyncIterator[FakeProvider]:
    server = FakeProvider("openai")
    async with server.running():
        yield server
    assert server.violations == [], server.violations


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    key = "sk-test-teams-0123456789"
    monkeypatch.setenv("OMA_TEST_KEY", key)
    return key
