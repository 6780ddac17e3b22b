"""``Agent.fork`` (PROTOCOL §22.4, the library's twin of ``agent/fork``; ``agent/fork.py``).

An llm agent forks itself (history copied); a process agent is stateless;
an ACP agent forks through its agent's ``session/fork`` (the TypeScript SDK
agent ``acp_ts_agent.mjs``, which keeps its sessions in a folder so that the
fork's own process resumes the fork), and one that does not advertise it is
refused.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from support.npm_peers import require_node

from oma_bridge import Agent
from oma_bridge.agent import AgentConfig
from oma_bridge.backends.acp import AcpConfig
from oma_bridge.backends.process import ProcessConfig
from oma_bridge.errors import BackendError

pytestmark = pytest.mark.anyio

TS_AGENT = Path(__file__).resolve().parent.parent / "agents" / "acp_ts_agent.mjs"


def texts(agent: Agent) -> list[str]:
    return [str(m["content"][0]["text"]) for m in agent.get_history()]


async def test_an_llm_agent_forks_and_each_goes_its_own_way() -> None:
    async with Agent(AgentConfig(provider="echo", model="echo-1")) as parent:
        await parent.prompt("one")
        async with await parent.fork() as fork:
            assert fork.get_history() == parent.get_history()
            assert fork.config.backend == parent.config.backend
            await fork.prompt("fork")
            await parent.prompt("parent")
            assert texts(parent) == ["one", "one", "parent", "parent"]
            assert texts(fork) == ["one", "one", "fork", "fork"]


async def test_a_process_agent_forks_and_a_closed_one_does_not() -> None:
    parent = Agent(AgentConfig(backend=ProcessConfig(command="wc", args=("-w",))))
    await parent.prompt("a b c")
    fork = await parent.fork()
    assert (await fork.prompt("a b")).output.strip() == "2"
    assert len(fork.get_history()) == 4 and len(parent.get_history()) == 2
    await fork.close()
    await parent.close()
    with pytest.raises(BackendError, match="is closed"):
        await parent.fork()


def ts_config(tmp_path: Path, sdk: Path, *, fork: bool) -> AgentConfig:
    env = {
        "OMA_ACP_TS_SDK_DIR": str(sdk),
        "OMA_TS_AGENT_STATE": str(tmp_path),
        "OMA_TS_AGENT_FORK": "1" if fork else "0",
    }
    backend = AcpConfig(
        command=require_node(), args=(str(TS_AGENT),), cwd=tmp_path, env=env, stop_grace_s=1.0
    )
    return AgentConfig(name="ts", backend=backend)


async def test_an_acp_agent_forks_through_its_agent(tmp_path: Path, acp_ts_sdk: Path) -> None:
    with anyio.fail_after(60):
        async with Agent(ts_config(tmp_path, acp_ts_sdk, fork=True)) as parent:
            await parent.prompt("echo alpha")
            async with await parent.fork() as fork:
                forked = fork.config.backend
                assert isinstance(forked, AcpConfig) and forked.resume_session is not None
                await parent.prompt("echo beta")
                assert (await fork.prompt("history")).output == "history:echo alpha"
                assert (await parent.prompt("history")).output == "history:echo alpha|echo beta"


async def test_an_acp_agent_that_does_not_advertise_fork_is_refused(
    tmp_path: Path, acp_ts_sdk: Path
) -> None:
    with anyio.fail_after(60):
        async with Agent(ts_config(tmp_path, acp_ts_sdk, fork=False)) as agent:
            await agent.prompt("echo alpha")
            with pytest.raises(BackendError, match="does not advertise session/fork"):
                await agent.fork()
            assert (await agent.prompt("history")).output == "history:echo alpha"
