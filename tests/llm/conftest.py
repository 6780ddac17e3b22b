"""Fixtures of the LLM tests: fake providers on 127.0.0.1, one per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fake_llm_provider import FakeProvider


async def _serve(flavor: str) -> AsyncIterator[FakeProvider]:
    server = FakeProvider(flavor)  # type: ignore[arg-type]
    async with server.running():
        yield server
    # A request the real API would have refused is a bug, even in a test that passed.
    assert server.violations == [], server.violations


@pytest.fixture
async def anthropic_server() -> AsyncIterator[FakeProvider]:
    async for server in _serve("anthropic"):
        yield server


@pytest.fixture
async def openai_server() -> AsyncIterator[FakeProvider]:
    async for server in _serve("openai"):
        yield server


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """A fake key in ``OMA_TEST_KEY``; tests check that it never leaks."""
    key = "sk-test-0123456789abcdef-SECRET"
    monkeypatch.setenv("OMA_TEST_KEY", key)
    return key
