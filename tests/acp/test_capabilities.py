"""What an ACP agent said it can do at ``initialize``, kept by its backend (PROTOCOL §22.2).

The scenario agent (the official Python SDK) advertises ``loadSession``,
``sessionCapabilities.resume`` and an auth method as its environment asks.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from oma_bridge.agent import Agent, AgentConfig
from oma_bridge.backends.acp import AcpBackend
from oma_bridge.errors import AuthRequiredError, BackendError

from .helpers import alive, run_text, scenario_config

pytestmark = pytest.mark.anyio


async def test_the_capabilities_of_the_last_initialize_outlive_the_agent(tmp_path: Path) -> None:
    config = scenario_config(tmp_path, env={"ACP_TEST_RESUME": "1"})
    backend = AcpBackend(config, agent_name="coder")
    assert backend.advertised() is None  # nothing is started to find out
    before = time.time()
    outcome, _ = await run_text(backend, "hello")
    assert outcome.error is None
    advertised = backend.advertised()
    assert advertised is not None
    assert advertised.pop("initializedAt") >= round(before, 3) - 0.001
    assert advertised == {
        "loadSession": True,
        "sessionCapabilities": {"resume": {}},
        # What it did not send is {} (the SDK leaves defaults out), not a guess.
        "promptCapabilities": {},
        "mcpCapabilities": {},
        "authMethods": [],
        "agentInfo": {"name": "scenario-agent", "version": "1.0"},
    }
    # A copy: what the caller does with it changes nothing here.
    advertised["loadSession"] = False
    assert backend.advertised()["loadSession"] is True  # type: ignore[index]
    await backend.aclose()
    assert backend.advertised() is not None  # kept after the agent ended


async def test_a_probe_starts_the_agent_for_initialize_alone_and_ends_it(tmp_path: Path) -> None:
    # session/new would fail (it wants a login first): the probe never asks for one.
    config = scenario_config(tmp_path, env={"ACP_TEST_AUTH": "required", "ACP_TEST_NO_LOAD": "1"})
    async with Agent(AgentConfig(name="coder", backend=config)) as agent:
        assert agent.advertised() is None
        advertised = await agent.probe()
        assert advertised["loadSession"] is False
        assert advertised["authMethods"] == [{"id": "key", "name": "API key"}]
        assert agent.advertised() == advertised
        backend = agent.backend
        assert isinstance(backend, AcpBackend) and backend.pid is None  # ended already
        # A run afterwards starts the agent as usual (and fails as the agent says).
        result = await agent.run("hello")
        assert not result.success and result.error_info is not None
        assert result.error_info.code == AuthRequiredError.code
        # The failed session/new came after an initialize: what it said is the newest.
        newer = agent.advertised()
        assert newer is not None and newer["initializedAt"] >= advertised["initializedAt"]


async def test_a_probe_of_a_running_agent_starts_nothing(tmp_path: Path) -> None:
    backend = AcpBackend(scenario_config(tmp_path), agent_name="coder")
    try:
        await run_text(backend, "hello")
        pid = backend.pid
        assert pid is not None
        assert await backend.probe() == backend.advertised()
        assert backend.pid == pid and alive(pid)
    finally:
        await backend.aclose()


async def test_a_probe_of_an_agent_that_cannot_start_says_why(tmp_path: Path) -> None:
    config = scenario_config(tmp_path, command=str(tmp_path / "missing"), args=())
    backend = AcpBackend(config, agent_name="coder")
    with pytest.raises(BackendError, match='ACP agent "coder" could not be started'):
        await backend.probe()
    assert backend.advertised() is None and backend.pid is None
    exits = scenario_config(tmp_path, args=("-c", "import sys; sys.exit(3)"))
    with pytest.raises(BackendError, match="exited with code 3"):
        await AcpBackend(exits, agent_name="coder").probe()
