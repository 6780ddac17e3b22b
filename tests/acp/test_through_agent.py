"""The ACP backend through the public ``Agent`` API."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from oma_bridge.agent import Agent, AgentConfig
from oma_bridge.backends import ElicitationRequest
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
        assert [e.type for e in events] == ["reasoning", "plan", "text", "done"]
        done = events[-1].data
        assert done.output == "answer" and done.success
        assert events[1].to_wire()["data"]["entries"][0]["content"] == "step one"
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
    assert agent.backend is None or agent.backend.pid is None  # type: ignore[attr-defined]
    await agent.close()


async def test_close_leaves_no_process(tmp_path: Path) -> None:
    agent = _agent(scenario_config(tmp_path))
    await agent.run("echo hi")
    pid = agent.backend.pid  # type: ignore[union-attr]
    assert pid is not None
    await agent.close()
    assert not group_alive(pid)


async def test_an_elicitation_goes_to_the_agents_handler(tmp_path: Path) -> None:
    asked: list[ElicitationRequest] = []

    async def fill(request: ElicitationRequest) -> dict[str, object]:
        asked.append(request)
        return {"action": "accept", "content": {"name": "Ada"}}

    agent = Agent(
        AgentConfig(name="coder", backend=scenario_config(tmp_path)), elicitation_handler=fill
    )
    try:
        with anyio.fail_after(20):
            result = await agent.run("elicit", run_id="run-e")
            url = await agent.run("elicit url")
    finally:
        await agent.close()
    assert result.output == 'elicitation:accept:{"name": "Ada"}'
    first, second = asked
    assert (first.agent_name, first.run_id, first.mode) == ("coder", "run-e", "form")
    assert first.params["toolCallId"] == "t9" and "sessionId" not in first.params
    assert second.mode == "url" and second.params["url"] == "https://example.com/login"
    assert url.output.startswith("elicitation:accept:")


@pytest.mark.parametrize(
    "answer",
    [
        None,
        {"action": "maybe"},
        {"action": "accept", "content": "Ada"},
        {"action": "cancel", "x": 1},
    ],
    ids=["no-handler", "unknown-action", "content-not-an-object", "extra-key"],
)
async def test_without_a_valid_answer_the_agent_gets_cancel(
    tmp_path: Path, answer: dict[str, object] | None
) -> None:
    async def reply(request: ElicitationRequest) -> dict[str, object]:
        assert answer is not None
        return answer

    agent = Agent(
        AgentConfig(name="coder", backend=scenario_config(tmp_path)),
        elicitation_handler=None if answer is None else reply,
    )
    try:
        with anyio.fail_after(20):
            result = await agent.run("elicit")
    finally:
        await agent.close()
    assert result.output == "elicitation:cancel:null"


async def test_meta_of_run_stream_and_prompt_reaches_the_agents_session_prompt(
    tmp_path: Path,
) -> None:
    trace = {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "tracestate": "vendor=abc",
    }
    agent = _agent(scenario_config(tmp_path))
    try:
        with anyio.fail_after(30):
            ran = await agent.run("meta", meta=trace)
            streamed = [e async for e in agent.stream("meta", meta={"vendor/x": [1]})]
            prompted = await agent.prompt("meta", meta=trace)
            plain = await agent.run("meta")
    finally:
        await agent.close()
    assert json.loads(ran.output) == trace
    assert json.loads(streamed[-1].data.output) == {"vendor/x": [1]}
    assert json.loads(prompted.output) == trace
    assert json.loads(plain.output) == {}  # no _meta sent when none was given
