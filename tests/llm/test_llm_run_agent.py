"""OpenMultiAgent.run_agent over a real LLM tool loop: budgets, progress and trace spans."""

from __future__ import annotations

from typing import Any

import pytest
from fake_llm_provider import FakeProvider, ToolCall, Turn

from oma_bridge.agent import AgentConfig
from oma_bridge.orchestration.orchestrator import OpenMultiAgent
from oma_bridge.results import TokenUsage
from oma_bridge.tools import ToolDefinition

pytestmark = pytest.mark.anyio


def config(server: FakeProvider, **options: Any) -> AgentConfig:
    return AgentConfig(
        name="looper",
        provider="anthropic",
        model="m",
        base_url=server.base_url,
        api_key_env="OMA_TEST_KEY",
        tools=(ToolDefinition(name="t", execute=lambda args: "r"),),
        **options,
    )


async def test_orchestrator_budget_across_a_multi_turn_tool_loop(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    anthropic_server.turn(
        Turn(text=["a"], tool_calls=[ToolCall("toolu_1", "t", {})], usage=(20, 10)),
        Turn(text=["b"], tool_calls=[ToolCall("toolu_2", "t", {})], usage=(30, 5)),
        Turn(text=["c"], tool_calls=[ToolCall("toolu_3", "t", {})], usage=(40, 5)),
    )
    progress: list[dict[str, Any]] = []
    spans: list[dict[str, Any]] = []
    oma = OpenMultiAgent(max_token_budget=60, on_progress=progress.append, on_trace=spans.append)
    # The agent's own ceiling is wider: the orchestrator's 60 is the smallest and applies.
    result = await oma.run_agent(config(anthropic_server, max_token_budget=500), "go")
    assert result.status.code == "budget_exhausted" and result.budget_exceeded
    assert result.token_usage == TokenUsage(50, 15)  # 30 after turn one, 65 > 60 after turn two
    assert len(anthropic_server.requests) == 2
    assert len(result.tool_calls) == 1
    assert [p["type"] for p in progress] == ["agent_start", "budget_exceeded", "agent_complete"]
    assert progress[1]["data"]["message"] == (
        'Agent "looper" exceeded token budget: 65 tokens used (budget: 60)'
    )
    root = next(s for s in spans if s["type"] == "agent")
    children = [s for s in spans if s is not root]
    assert [s["type"] for s in children] == ["llm_call", "tool_call", "llm_call", "tool_call"]
    # The second turn's tool was announced, then the budget stopped the loop before it ran.
    assert children[1]["attributes"] == {"toolUseId": "toolu_1", "isError": False}
    assert children[3]["attributes"] == {"toolUseId": "toolu_2", "completed": False}
    assert all(s["parentId"] == root["spanId"] for s in spans if s is not root)
    assert root["attributes"]["status"] == "budget_exhausted"


async def test_cost_cap_over_a_tool_loop_uses_the_whole_usage(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    anthropic_server.turn(
        Turn(text=["a"], tool_calls=[ToolCall("toolu_1", "t", {})], usage=(100, 10)),
        Turn(text=["done"], usage=(200, 20)),
    )
    seen: list[TokenUsage] = []

    def estimate(usage: TokenUsage, info: dict[str, Any]) -> float:
        seen.append(usage)
        return usage.input_tokens * 0.001 + usage.output_tokens * 0.002

    oma = OpenMultiAgent(max_cost_budget=0.3, estimate_cost=estimate)
    result = await oma.run_agent(config(anthropic_server), "go")
    assert seen == [TokenUsage(300, 30)]
    assert result.status.code == "budget_exhausted"
    assert result.error_info is not None and result.error_info.code == "COST_BUDGET_EXCEEDED"
