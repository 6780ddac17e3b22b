"""The tool loop (sync, async, raising, unknown tools; max_turns) and token budgets."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest
from fake_llm_provider import FakeProvider, ToolCall, Turn
from llm_helpers import backend_for, run_backend, user

from oma_bridge import Agent
from oma_bridge.agent import AgentConfig
from oma_bridge.errors import TokenBudgetExceededError
from oma_bridge.tools import ToolDefinition

pytestmark = pytest.mark.anyio


def call(i: int, name: str, **args: Any) -> ToolCall:
    return ToolCall(f"toolu_{i}", name, args)


async def test_sync_async_raising_and_unknown_tools(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    threads: list[str] = []

    def sync_tool(args: dict[str, Any]) -> str:
        threads.append(threading.current_thread().name)
        return f"sync:{args['v']}"

    async def async_tool(args: dict[str, Any]) -> list[int]:
        await anyio.sleep(0.01)
        return [args["v"], args["v"]]

    def broken(args: dict[str, Any]) -> str:
        raise RuntimeError("disk on fire, api_key=hunter2")

    tools = tuple(
        ToolDefinition(name=n, execute=f)
        for n, f in [("sync_tool", sync_tool), ("async_tool", async_tool), ("broken", broken)]
    )
    anthropic_server.turn(
        Turn(
            tool_calls=[
                call(1, "sync_tool", v=1),
                call(2, "async_tool", v=2),
                call(3, "broken"),
                call(4, "missing"),
            ]
        ),
        Turn(text=["done"]),
    )
    backend = backend_for("anthropic", anthropic_server.base_url, tools=tools)
    outcome, events = await run_backend(backend, [user("go")])

    assert outcome.output == "done"
    results = [e.data for e in events if e.type == "tool_result"]
    assert results == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sync:1"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "[2,2]"},
        {
            "type": "tool_result",
            "tool_use_id": "toolu_3",
            "content": "Tool 'broken' failed: RuntimeError: disk on fire, api_key=[redacted]",
            "is_error": True,
        },
        {
            "type": "tool_result",
            "tool_use_id": "toolu_4",
            "content": 'Tool "missing" is not available',
            "is_error": True,
        },
    ]
    assert threads and threads[0] != threading.main_thread().name  # off the event loop
    assert [(r.tool_name, r.input) for r in outcome.tool_calls] == [
        ("sync_tool", {"v": 1}),
        ("async_tool", {"v": 2}),
        ("broken", {}),
        ("missing", {}),
    ]
    assert anthropic_server.bodies[1]["messages"][-1] == {"role": "user", "content": results}


async def test_max_turns_bounds_the_model_calls(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    tool = ToolDefinition(name="again", execute=lambda args: "more")
    anthropic_server.turn(*(Turn(text=[f"t{i}"], tool_calls=[call(i, "again")]) for i in range(2)))
    backend = backend_for("anthropic", anthropic_server.base_url, tools=(tool,))
    outcome, _ = await run_backend(backend, [user("loop")], max_turns=2)
    assert len(anthropic_server.requests) == 2
    assert len(outcome.tool_calls) == 2
    assert outcome.output == "t1"
    assert [m["role"] for m in outcome.messages] == ["assistant", "user", "assistant", "user"]


async def test_budget_checked_at_turn_boundaries(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    tool = ToolDefinition(name="t", execute=lambda args: "r")
    anthropic_server.turn(
        Turn(text=["a"], tool_calls=[call(1, "t")], usage=(40, 10)),  # 50: exactly the budget
        Turn(text=["b"], tool_calls=[call(2, "t")], usage=(45, 5)),  # 100 > 50: stop here
    )
    backend = backend_for("anthropic", anthropic_server.base_url, tools=(tool,))
    outcome, events = await run_backend(backend, [user("go")], max_token_budget=50)
    assert outcome.budget_exceeded
    assert len(anthropic_server.requests) == 2
    assert len(outcome.tool_calls) == 1  # the second turn's tool never ran
    (event,) = [e for e in events if e.type == "budget_exceeded"]
    assert isinstance(event.data, TokenBudgetExceededError)
    assert str(event.data) == 'Agent "tester" exceeded token budget: 100 tokens used (budget: 50)'


async def test_budget_through_agent_stream(openai_server: FakeProvider, api_key: str) -> None:
    openai_server.turn(Turn(text=["over"], usage=(8, 3)))
    config = AgentConfig(
        name="thrifty",
        provider="openai",
        model="m",
        base_url=openai_server.base_url,
        api_key_env="OMA_TEST_KEY",
        max_token_budget=10,
    )
    async with Agent(config) as agent:
        events = [e async for e in agent.stream("hi")]
    assert [e.type for e in events] == ["text", "budget_exceeded", "done"]
    result = events[-1].data
    assert result.status.code == "budget_exhausted"
    assert result.budget_exceeded
    assert result.to_wire()["tokenUsage"] == {"input_tokens": 8, "output_tokens": 3}


async def test_tool_calls_through_agent_run(anthropic_server: FakeProvider, api_key: str) -> None:
    tool = ToolDefinition(name="echo", execute=lambda args: args["x"])
    anthropic_server.turn(Turn(tool_calls=[call(1, "echo", x="pong")]), Turn(text=["got pong"]))
    config = AgentConfig(
        name="tooler",
        provider="anthropic",
        model="m",
        base_url=anthropic_server.base_url,
        api_key_env="OMA_TEST_KEY",
        tools=(tool,),
    )
    async with Agent(config) as agent:
        result = await agent.run("ping")
    wire = result.to_wire()
    assert wire["success"] is True
    assert wire["output"] == "got pong"
    assert [{k: v for k, v in c.items() if k != "duration"} for c in wire["toolCalls"]] == [
        {"toolName": "echo", "input": {"x": "pong"}, "output": "pong"}
    ]
    assert len(wire["messages"]) == 3


async def test_a_blocking_tool_does_not_hold_up_the_whole_run_timeout(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    release = threading.Event()

    def blocking(args: dict[str, Any]) -> str:
        release.wait(5)  # a tool stuck in blocking I/O
        return "late"

    anthropic_server.turn(Turn(text=["calling "], tool_calls=[call(1, "blocking")]))
    config = AgentConfig(
        name="patient",
        provider="anthropic",
        model="m",
        base_url=anthropic_server.base_url,
        api_key_env="OMA_TEST_KEY",
        tools=(ToolDefinition(name="blocking", execute=blocking),),
        timeout_ms=300,
    )
    try:
        with anyio.fail_after(3):
            async with Agent(config) as agent:
                result = await agent.run("go")
    finally:
        release.set()
    assert result.status.code == "timeout"
    assert result.output == "calling "


async def test_prompt_carries_the_conversation_to_the_next_request(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    anthropic_server.turn(Turn(text=["Hello."]), Turn(text=["Still here."]))
    config = AgentConfig(
        name="chatty",
        provider="anthropic",
        model="m",
        base_url=anthropic_server.base_url,
        api_key_env="OMA_TEST_KEY",
        system_prompt="You are terse.",
    )
    async with Agent(config) as agent:
        first = await agent.prompt("hi")
        second = await agent.prompt([{"type": "text", "text": "again"}])
    assert (first.output, second.output) == ("Hello.", "Still here.")
    body = anthropic_server.bodies[1]
    assert body["system"] == "You are terse."
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
        {"role": "user", "content": [{"type": "text", "text": "again"}]},
    ]
    assert len(agent.get_history()) == 4
