"""``agents/list`` says which profiles can run (PROTOCOL §18.3): ``ready``, and ``notReady``."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.wire import wire_client

from .conftest import daemon

pytestmark = pytest.mark.anyio

AGENTS = """
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"

[agents.claude]
kind = "llm"
provider = "anthropic"
model = "claude-sonnet-4-5"
api_key_env = "OMA_TEST_UNSET_KEY"

[agents.local]
kind = "llm"
provider = "openai"
model = "llama"
base_url = "http://127.0.0.1:1/v1"

[agents.wordcount]
kind = "process"
command = "wc"
"""


async def test_a_profile_without_its_key_is_not_ready(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMA_TEST_UNSET_KEY", raising=False)
    async with (
        daemon(short_dir, agents=AGENTS),
        wire_client(short_dir / "bridge.sock") as wire,
    ):
        listed = {a["name"]: a for a in (await wire.result("agents/list"))["agents"]}
        assert listed["claude"]["ready"] is False
        assert listed["claude"]["notReady"] == (
            "OMA_TEST_UNSET_KEY is not set in the daemon's environment"
        )
        # echo needs no key; a local OpenAI-compatible server without api_key_env neither.
        for name in ("echo", "local", "wordcount"):
            assert listed[name]["ready"] is True and "notReady" not in listed[name]
        # It is read when asked: set now, the profile is ready (its runs read it at call time).
        monkeypatch.setenv("OMA_TEST_UNSET_KEY", "sk-test-not-a-real-key")
        again = {a["name"]: a for a in (await wire.result("agents/list"))["agents"]}
        assert again["claude"]["ready"] is True and "notReady" not in again["claude"]
