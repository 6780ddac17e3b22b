"""Budgets across the tasks of a team run, counted as each run's result comes in."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from fake_llm_provider import FakeProvider, Turn

from oma_bridge import OpenMultiAgent
from oma_bridge.agent import AgentConfig

from .helpers import Events

pytestmark = pytest.mark.anyio


def _member(name: str, server: FakeProvider) -> AgentConfig:
    return AgentConfig(
        name=name,
        provider="openai",
        model="m",
        base_url=server.base_url,
        api_key_env="OMA_TEST_KEY",
    )


def _task(title: str, assignee: str, *deps: str) -> dict[str, Any]:
    return {"id": title.lower(), "title": title, "description": title, "assignee": assignee,
            "dependsOn": list(deps)}  # fmt: skip


async def test_each_run_gets_what_is_left_and_the_crossing_stops_the_run(
    openai_server: FakeProvider, api_key: str
) -> None:
    openai_server.turn(*[Turn(text=["ok"], usage=(10, 5))] * 2)
    events = Events()
    oma = OpenMultiAgent(on_progress=events, max_token_budget=100)
    team = {"m": _member("m", openai_server)}
    tasks = [_task("T1", "m"), _task("T2", "m", "T1"), _task("T3", "m", "T2"), _task("Free", "m")]
    with anyio.fail_after(20):
        result = await oma.run_tasks(team, tasks, max_token_budget=20)
    # T1 (15 tokens) left 5 for T2, whose run stopped at that ceiling.
    t2 = result.task("T2").result
    assert t2 is not None and t2.status.code == "budget_exhausted"
    assert t2.status.message == 'Agent "m" exceeded token budget: 15 tokens used (budget: 5)'
    assert {t.title: t.status for t in result.tasks} == {
        "T1": "completed",
        "T2": "failed",
        "T3": "skipped",
        "Free": "skipped",
    }
    assert result.task("T3").reason == 'Skipped: dependency "T2" failed.'
    # The run's total crossed too: what had not started is skipped with that message.
    run_message = 'Agent "m" exceeded token budget: 30 tokens used (budget: 20)'
    assert result.task("Free").reason == run_message
    assert result.status.message == run_message
    assert result.status.code == "budget_exhausted" and not result.success
    assert result.token_usage.to_wire() == {"input_tokens": 20, "output_tokens": 10}
    assert len(openai_server.requests) == 2
    # One announcement of the crossing: the run's own.
    (exceeded,) = events.of("budget_exceeded")
    assert exceeded["task"] == "t2" and exceeded["data"]["code"] == "TOKEN_BUDGET_EXCEEDED"


async def test_runs_crossing_the_budget_together_stop_admission(
    openai_server: FakeProvider, api_key: str
) -> None:
    openai_server.turn(*[Turn(text=["ok"], usage=(10, 5))] * 2)
    events = Events()
    team = {name: _member(name, openai_server) for name in ("a", "b", "c")}
    tasks = [_task("A", "a"), _task("B", "b"), _task("C", "c", "A", "B")]
    with anyio.fail_after(20):
        result = await OpenMultiAgent(on_progress=events).run_tasks(
            team, tasks, max_token_budget=20
        )
    # Each run had 20 to spend and spent 15: neither crossed alone, the second result did.
    assert [t.status for t in result.tasks] == ["completed", "completed", "skipped"]
    (exceeded,) = events.of("budget_exceeded")
    crossing = exceeded["agent"]
    assert crossing in ("a", "b") and exceeded["task"] == crossing
    message = f'Agent "{crossing}" exceeded token budget: 30 tokens used (budget: 20)'
    assert exceeded["data"] == {"name": "TokenBudgetExceededError",
                                "code": "TOKEN_BUDGET_EXCEEDED", "message": message}  # fmt: skip
    assert result.task("C").reason == message
    assert result.status.code == "budget_exhausted"
    assert len(openai_server.requests) == 2


async def test_the_cost_budget_sums_the_runs(openai_server: FakeProvider, api_key: str) -> None:
    openai_server.turn(*[Turn(text=["ok"], usage=(10, 5))] * 2)
    seen: list[dict[str, Any]] = []

    def estimate(usage: Any, info: dict[str, Any]) -> float:
        seen.append(info)
        return usage.total / 10

    oma = OpenMultiAgent(max_cost_budget=2.0, estimate_cost=estimate)
    tasks = [_task("A", "m"), _task("B", "m", "A"), _task("C", "m", "B")]
    with anyio.fail_after(20):
        result = await oma.run_tasks({"m": _member("m", openai_server)}, tasks)
    assert [t.status for t in result.tasks] == ["completed", "completed", "skipped"]
    assert result.task("C").reason == (
        'Agent "m" exceeded cost budget: 3 estimated cost used (budget: 2)'
    )
    assert [(i["phase"], i["taskId"]) for i in seen] == [("task", "a"), ("task", "b")]
