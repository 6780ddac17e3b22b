"""What each acp profile's agent can do, in ``agents/list`` and ``daemon/status`` (PROTOCOL §22.2).

Shown once an agent of the profile was initialized (a first prompt), kept
after it closes, and filled in for every acp profile by ``agents/probe``
(the extension behind ``oma-bridge agents --probe``), which starts each
agent for its ``initialize`` alone and leaves no process behind.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest
from acp.helpers import SCENARIO

from oma_bridge.client import DaemonError, connect
from oma_bridge.server.agents.capabilities import ProfileCapabilities

from .conftest import daemon

pytestmark = pytest.mark.anyio

AGENTS = f"""
[agents.scenario]
kind = "acp"
command = "{sys.executable}"
args = ["{SCENARIO}"]
env = {{ ACP_TEST_RESUME = "1" }}

[agents.login]
kind = "acp"
command = "{sys.executable}"
args = ["{SCENARIO}"]
env = {{ ACP_TEST_AUTH = "required", ACP_TEST_NO_LOAD = "1" }}

[agents.broken]
kind = "acp"
command = "/nonexistent/agent"

[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"
"""


def by_name(agents: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    return {str(agent["name"]): agent for agent in agents}


async def test_capabilities_after_a_first_prompt_and_after_a_probe(short_dir: Path) -> None:
    async with daemon(short_dir, agents=AGENTS), connect(discovery_dir=short_dir) as client:
        assert all("capabilities" not in a for a in await client.list_agents())
        assert (await client.status())["capabilities"] == {}
        agent = await client.open("scenario")
        assert (await agent.run("hello")).success
        shown = by_name(await client.list_agents())["scenario"]["capabilities"]
        assert isinstance(shown, dict)
        assert shown["loadSession"] is True
        assert shown["sessionCapabilities"] == {"resume": {}}
        assert shown["agentInfo"] == {"name": "scenario-agent", "version": "1.0"}
        assert (await client.status())["capabilities"] == {"scenario": shown}
        await agent.close()
        # Its last word outlives it.
        assert by_name(await client.list_agents())["scenario"]["capabilities"] == shown

        probed = by_name(await client.probe_agents())
        login = probed["login"]["capabilities"]
        assert isinstance(login, dict)
        assert login["authMethods"] == [{"id": "key", "name": "API key"}]
        assert login["loadSession"] is False  # session/new would want the login: never sent
        assert "could not be started" in str(probed["broken"]["probeError"])
        assert "capabilities" not in probed["broken"]
        assert probed["echo"] == {"name": "echo", "kind": "llm", "ready": True, "model": "echo-1"}
        new_scenario = probed["scenario"]["capabilities"]
        assert isinstance(new_scenario, dict)
        assert new_scenario["initializedAt"] >= shown["initializedAt"]  # type: ignore[operator]
        status = await client.status()
        assert set(status["capabilities"]) == {"scenario", "login"}
        assert status["processes"] == []  # a probe leaves no process behind
        assert by_name(await client.list_agents())["login"]["capabilities"] == login
        # Only the asked profiles are started; a name that is none, or no acp profile, is refused.
        only = by_name(await client.probe_agents(["login"]))
        assert "probeError" not in only["broken"]
        with pytest.raises(DaemonError) as unknown:
            await client.probe_agents(["nope"])
        assert unknown.value.rpc_code == -32011
        with pytest.raises(DaemonError) as not_acp:
            await client.probe_agents(["echo"])
        assert not_acp.value.rpc_code == -32602
        assert "only acp agents say what they can do" in str(not_acp.value.data)


async def test_oma_bridge_agents_probe_prints_what_each_agent_can_do(short_dir: Path) -> None:
    folder = short_dir / "oma-bridge"  # where the command line looks: $XDG_RUNTIME_DIR/oma-bridge
    folder.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(short_dir)}
    async with daemon(folder, agents=AGENTS):
        probed = await anyio.run_process(
            [sys.executable, "-m", "oma_bridge.cli", "agents", "--probe"], env=env, check=False
        )
        listed = await anyio.run_process(
            [sys.executable, "-m", "oma_bridge.cli", "agents"], env=env, check=False
        )
    out = probed.stdout.decode()
    assert probed.returncode == 1  # one profile could not be started
    table = out[out.index("CAPABILITIES") :].splitlines()
    assert table[1].split() == ["NAME", "LOAD", "SESSION", "PROMPT", "MCP", "AUTH"]
    rows = {line.split()[0]: line.split() for line in table[2:]}
    assert rows["scenario"] == ["scenario", "yes", "resume", "-", "-", "-"]
    assert rows["login"] == ["login", "no", "-", "-", "-", "key"]
    assert set(rows) == {"scenario", "login"}
    err = probed.stderr.decode()
    assert err.startswith('oma-bridge: broken: ACP agent "broken" could not be started')
    # What the probe heard, a plain `agents` shows too (and exits 0).
    assert listed.returncode == 0
    assert "CAPABILITIES" in listed.stdout.decode() and "login" in listed.stdout.decode()


def test_a_reload_forgets_the_profiles_it_changes() -> None:
    heard = ProfileCapabilities()
    for name in ("same", "changed", "removed"):
        heard.note(name, {"loadSession": True, "initializedAt": 1.0})
    heard.note("same", {"loadSession": False, "initializedAt": 0.5})  # older: not taken
    heard.forget_changed({"same": 1, "changed": 1, "removed": 1}, {"same": 1, "changed": 2})
    assert heard.read([]) == {"same": {"loadSession": True, "initializedAt": 1.0}}
