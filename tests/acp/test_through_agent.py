"""The ACP backend through the public ``Agent`` API."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from oma_bridge.agent import Agent, AgentConfig
from oma_bridge.backends.acp import AcpConfig
from oma_bridge.errors import InvalidMessageError

from .helpers import group_alive, scenario_config

pytestmark = pytest.mark.anyio


def _agent(config: AcpConfig, **fields: object) -> Agent:
    return Agent(AgentConfig(name="coder", backend=config, **fields))  # type: ignore[arg-type]


async def test_run_and_stream_share_the_session(tmp_path: Path) -> None:
    agent = _agent(scenario_config(tmp_path), system_prompt="Be brief.")
    try:
        result = await agent.run("echo one")
        assert result.success and result.output == "Be brief.\n\necho one"
        assert result.status.code == "ok"
        events = [event async for event in agent.stream("thought")]
        assert [e.type for e in events] == ["reasoning", "update", "text", "done"]
        done = events[-1].data
        assert done.output == "answer" and done.success
        assert events[1].to_wire()["data"]["sessionUpdate"] == "plan"
    finally:
        await agent.close()


async def test_agent_cancel_ends_cancelled_with_partial_output(tmp_path: Path) -> None:
    agent = _agent(scenario_config(tmp_path))
    try:
        stream = agent.stream("slow", run_id="run-1")
        texts: list[str] = []
        with anyio.fail_after(20):
            async for event in stream:
                if event.type == "text":
                    texts.append(event.data)
                    assert agent.cancel("run-1")
                if event.type == "done":
                    result = event.data
        assert result.status.code == "cancelled"
        assert not result.success
        assert result.output.startswith("started")
    finally:
        await agent.close()


async def test_structured_input_never_spawns(tmp_path: Path) -> None:
    agent = _agent(scenario_config(tmp_path))
    with pytest.raises(InvalidMessageError, match="accepts string prompts only"):
        await agent.run([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    assert agent._backend is None or agent._backend.pid is None  # type: ignore[attr-defined]
    await agent.close()


async def test_close_leaves_no_process(tmp_path: Path) -> None:
    agent = _agent(scenario_config(tmp_path))
    await agent.run("echo hi")
    pid = agent._backend.pid  # type: ignore[union-attr]
    assert pid is not None
    await agent.close()
    assert not group_alive(pid)
