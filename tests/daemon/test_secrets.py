"""The daemon's secrets never reach agent processes unless a profile passes them (§11.38)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from oma_bridge.client import connect

from .conftest import daemon

pytestmark = pytest.mark.anyio

SCENARIO_AGENT = Path(__file__).resolve().parent.parent / "agents" / "acp_scenario_agent.py"

AGENTS = f"""
[agents.claude]
kind = "llm"
provider = "anthropic"
model = "m"
api_key_env = "OMAB_TEST_SECRET"

[agents.gpt]
kind = "llm"
provider = "openai"
model = "m"

[agents.plain]
kind = "process"
command = "printenv"
input = "none"

[agents.trusted]
kind = "process"
command = "printenv"
input = "none"
pass_env = ["OMAB_TEST_SECRET"]

[agents.coder]
kind = "acp"
command = "{sys.executable}"
args = ["{SCENARIO_AGENT}"]
terminal = true
pass_env = ["OMAB_TEST_SECRET"]
"""


async def test_llm_keys_and_token_are_hidden_from_agents(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMAB_TEST_SECRET", "s3cret-value")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-value")
    monkeypatch.setenv("OMAB_TEST_HARMLESS", "visible")
    async with daemon(short_dir, agents=AGENTS), connect(discovery_dir=short_dir) as client:
        plain = await (await client.open("plain")).run("x")
        trusted = await (await client.open("trusted")).run("x")
    assert plain.success and trusted.success
    plain_env = dict(line.split("=", 1) for line in plain.output.splitlines() if "=" in line)
    trusted_env = dict(line.split("=", 1) for line in trusted.output.splitlines() if "=" in line)
    assert plain_env["OMAB_TEST_HARMLESS"] == "visible"
    for hidden in ("OMAB_TEST_SECRET", "OPENAI_API_KEY", "OMA_BRIDGE_TOKEN"):
        assert hidden not in plain_env
    assert trusted_env["OMAB_TEST_SECRET"] == "s3cret-value"
    assert "OPENAI_API_KEY" not in trusted_env


async def test_terminals_of_acp_agents_get_the_scrubbed_environment(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ACP terminal/* commands once inherited the daemon's whole environment.
    monkeypatch.setenv("OMAB_TEST_SECRET", "s3cret-value")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-value")
    monkeypatch.setenv("OMA_BRIDGE_TOKEN", "t" * 64)
    monkeypatch.setenv("NOTIFY_SOCKET", f"{short_dir}/no-systemd-here")
    monkeypatch.setenv("OMAB_TEST_HARMLESS", "visible")
    async with daemon(short_dir, agents=AGENTS), connect(discovery_dir=short_dir) as client:
        result = await (await client.open("coder")).run("terminalenv")
    assert result.success, result.status
    env = dict(line.split("=", 1) for line in result.output.splitlines() if "=" in line)
    assert env["OMAB_TEST_HARMLESS"] == "visible"
    assert env["OMAB_FROM_REQUEST"] == "laid-over"  # the request's env, laid over it
    assert env["OMA_BRIDGE_SUPERVISOR_TAG"]  # tagged: the crash watchdog finds it
    # The agent's own pass_env is the agent's: a terminal gets it only if the agent passes it.
    for hidden in ("OMAB_TEST_SECRET", "OPENAI_API_KEY", "OMA_BRIDGE_TOKEN", "NOTIFY_SOCKET"):
        assert hidden not in env
