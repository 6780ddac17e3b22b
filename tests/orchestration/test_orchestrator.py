"""OpenMultiAgent.run_agent: progress, identity, traces, budgets, evaluation hand-over."""

from __future__ import annotations

import re
from typing import Any

import pytest
from agent.fakes import Journal, ScriptedConfig

from oma_bridge.agent import AgentConfig, prepare
from oma_bridge.errors import InvalidMessageError
from oma_bridge.orchestration.evaluation import EvaluationConfig
from oma_bridge.orchestration.orchestrator import OpenMultiAgent
from oma_bridge.results import TokenUsage

pytestmark = pytest.mark.anyio


def llm_config(**backend: Any) -> AgentConfig:
    return AgentConfig(name="worker", backend=ScriptedConfig(journal=Journal(), **backend))


def messages() -> list[Any]:
    return [{"role": "user", "content": [{"type": "text", "text": "hello structured"}]}]


def test_cost_budget_without_estimator_is_refused() -> None:
    with pytest.raises(ValueError) as caught:
        OpenMultiAgent(max_cost_budget=1.0)
    assert str(caught.value) == (
        "maxCostBudget requires estimateCost so cost caps cannot be silently ignored."
    )


async def test_rejected_external_input_emits_nothing_and_samples_nothing() -> None:
    progress: list[Any] = []
    traces: list[Any] = []
    evaluation = EvaluationConfig(scorers=[lambda e: {"score": 1, "pass": True}])
    oma = OpenMultiAgent(on_progress=progress.append, on_trace=traces.append, evaluation=evaluation)
    journal = Journal()
    config = AgentConfig(name="proc", backend=ScriptedConfig(journal=journal, kind="process"))
    with pytest.raises(InvalidMessageError, match="accepts string prompts only"):
        await oma.run_agent(config, messages())
    with pytest.raises(InvalidMessageError, match=r"messages\[0\] must be an object"):
        await oma.run_agent(llm_config(), [5])  # type: ignore[list-item]
    assert progress == [] and traces == []
    assert oma.evaluator is not None and oma.evaluator.stats.sampled == 0
    assert journal.created == 0


async def test_progress_events_for_string_input_and_identity() -> None:
    progress: list[dict[str, Any]] = []
    oma = OpenMultiAgent(on_progress=progress.append)
    result = await oma.run_agent(llm_config(), "hi there", run_id="run-7")
    assert [p["type"] for p in progress] == ["agent_start", "agent_complete"]
    assert progress[0] == {"type": "agent_start", "agent": "worker", "data": {"prompt": "hi there"}}
    assert progress[1]["data"] is result
    assert result.identity is not None
    assert result.identity.run_id == "run-7" and result.identity.attempt == 1
    assert re.fullmatch(r"[0-9a-f]{32}", result.identity.trace_id)
    assert re.fullmatch(r"[0-9a-f]{16}", result.identity.root_span_id)
    assert result.to_wire()["identity"]["traceId"] == result.identity.trace_id


async def test_agent_start_messages_are_an_independent_copy() -> None:
    journal = Journal()

    def vandal(event: dict[str, Any]) -> None:
        if event["type"] == "agent_start":
            event["data"]["messages"][0]["content"][0]["text"] = "VANDALISED"

    oma = OpenMultiAgent(on_progress=vandal)
    config = AgentConfig(name="w", backend=ScriptedConfig(journal=journal))
    original = messages()
    await oma.run_agent(config, original)
    assert original == messages()
    assert journal.runs[0]["messages"] == messages()


async def test_progress_callback_errors_do_not_break_the_run() -> None:
    def broken(event: dict[str, Any]) -> None:
        raise RuntimeError("observer bug")

    oma = OpenMultiAgent(on_progress=broken, on_trace=broken)
    result = await oma.run_agent(llm_config(), "still fine")
    assert result.success is True


async def test_token_budget_emits_budget_exceeded_progress() -> None:
    progress: list[dict[str, Any]] = []
    oma = OpenMultiAgent(on_progress=progress.append, max_token_budget=3)
    config = AgentConfig(
        name="w",
        max_token_budget=10,
        backend=ScriptedConfig(journal=Journal(), budget_exceeded=True),
    )
    result = await oma.run_agent(config, "x")
    assert [p["type"] for p in progress] == ["agent_start", "budget_exceeded", "agent_complete"]
    assert progress[1]["data"]["code"] == "TOKEN_BUDGET_EXCEEDED"
    assert (
        progress[1]["data"]["message"]
        == 'Agent "w" exceeded token budget: 5 tokens used (budget: 3)'
    )
    assert result.status.code == "budget_exhausted"


async def test_smallest_token_ceiling_reaches_the_backend() -> None:
    journal = Journal()
    oma = OpenMultiAgent(max_token_budget=50)
    await oma.run_agent(
        AgentConfig(max_token_budget=80, backend=ScriptedConfig(journal=journal)), "x"
    )
    await oma.run_agent(
        AgentConfig(max_token_budget=20, backend=ScriptedConfig(journal=journal)), "x"
    )
    assert [run["max_token_budget"] for run in journal.runs] == [50, 20]


async def test_cost_cap_fails_the_run_with_budget_exhausted() -> None:
    seen: list[tuple[TokenUsage, dict[str, Any]]] = []

    def estimate(usage: TokenUsage, info: dict[str, Any]) -> float:
        seen.append((usage, info))
        return usage.total * 0.5

    progress: list[dict[str, Any]] = []
    oma = OpenMultiAgent(on_progress=progress.append, max_cost_budget=2, estimate_cost=estimate)
    result = await oma.run_agent(llm_config(), "x")
    assert seen[0][0] == TokenUsage(3, 2)
    assert seen[0][1]["agentName"] == "worker"
    assert (result.success, result.status.code, result.budget_exceeded) == (
        False,
        "budget_exhausted",
        True,
    )
    assert result.error_info is not None and result.error_info.code == "COST_BUDGET_EXCEEDED"
    assert (
        result.status.message
        == 'Agent "worker" exceeded cost budget: 2.5 estimated cost used (budget: 2)'
    )
    assert "budget_exceeded" in [p["type"] for p in progress]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
async def test_non_finite_or_negative_cost_fails_the_run(bad: float) -> None:
    oma = OpenMultiAgent(max_cost_budget=100, estimate_cost=lambda usage, info: bad)
    result = await oma.run_agent(llm_config(), "x")
    assert result.success is False and result.status.code == "error"
    assert "estimateCost" in result.output or "estimateCost" in (result.status.message or "")


async def test_trace_spans_nest_under_the_agent_span() -> None:
    spans: list[dict[str, Any]] = []
    oma = OpenMultiAgent(on_trace=spans.append)
    result = await oma.run_agent(llm_config(tool_events=True), "alpha beta")
    by_type: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_type.setdefault(span["type"], []).append(span)
    [root] = by_type["agent"]
    assert result.identity is not None
    assert root["spanId"] == result.identity.root_span_id and root["parentId"] is None
    assert spans[-1] is root  # the root closes last
    assert len(by_type["tool_call"]) == 2
    assert len(by_type["llm_call"]) == 3  # before each tool batch, and the final turn
    for child in by_type["tool_call"] + by_type["llm_call"]:
        assert child["parentId"] == root["spanId"]
        assert child["traceId"] == result.identity.trace_id
        assert root["startTime"] <= child["startTime"] <= child["endTime"] <= root["endTime"]
    assert len({s["spanId"] for s in spans}) == len(spans)


async def test_cancel_a_live_run_agent_call() -> None:
    import anyio

    oma = OpenMultiAgent()
    box: list[Any] = []

    async def go() -> None:
        box.append(await oma.run_agent(llm_config(delay_s=0.2), "a b c", run_id="live"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(go)
        await anyio.sleep(0.05)
        assert oma.cancel("live") is True
    assert box[0].status.code == "cancelled"
    assert oma.cancel("live") is False


async def test_run_agent_takes_input_prepared_against_its_config() -> None:
    config = llm_config()
    progress: list[dict[str, Any]] = []
    oma = OpenMultiAgent(on_progress=progress.append)
    prepared = prepare(messages(), config)
    result = await oma.run_agent(config, prepared)
    assert result.success and result.output == "hello structured "
    assert progress[0]["data"] == {"messages": messages()}
    with pytest.raises(RuntimeError, match="serves one run"):
        await oma.run_agent(config, prepared)
    text = prepare("plain", config)
    assert (await oma.run_agent(config, text)).output == "plain "
    starts = [event["data"] for event in progress if event["type"] == "agent_start"]
    assert starts == [{"messages": messages()}, {"prompt": "plain"}]
