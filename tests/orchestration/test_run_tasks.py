"""OpenMultiAgent.run_tasks on real process members: layout, parallelism, cascade, retries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from fake_llm_provider import FakeProvider, error_reply

from oma_bridge import OpenMultiAgent, TaskSpec, Team, TeamRunResult
from oma_bridge.agent import AgentConfig

from .helpers import Events, live_children, shell

pytestmark = pytest.mark.anyio


def _overlap(a: Any, b: Any) -> bool:
    return bool(a.started_at < b.ended_at and b.started_at < a.ended_at)


def _most_at_once(result: TeamRunResult) -> int:
    edges = sorted(
        [(t.started_at, 1) for t in result.tasks] + [(t.ended_at, -1) for t in result.tasks],
        key=lambda edge: (edge[0], edge[1]),
    )
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


async def test_diamond_lays_dependency_outputs_in_and_runs_branches_in_parallel(
    tmp_path: Path,
) -> None:
    events = Events()
    oma = OpenMultiAgent(on_progress=events)
    team = {
        "alpha": shell("alpha", "cat", tmp_path),
        "beta": shell("beta", "sleep 0.3; cat", tmp_path),
        "gamma": shell("gamma", "sleep 0.3; cat", tmp_path),
        "delta": shell("delta", "cat", tmp_path),
    }
    tasks = [
        {"id": "a", "title": "A", "description": "Write a.", "assignee": "alpha"},
        {"id": "b", "title": "B", "description": "Do b.", "assignee": "beta", "dependsOn": ["A"]},
        {"id": "c", "title": "C", "description": "Do c.", "assignee": "gamma", "dependsOn": ["a"]},
        TaskSpec(title="D", description="Join.", assignee="delta", depends_on=("B", "c"), id="d"),
    ]
    with anyio.fail_after(20):
        result = await oma.run_tasks(team, tasks, run_id="diamond")

    a_out = "# Task: A\n\nWrite a."
    b_out = f"# Task: B\n\nDo b.\n\n## Context from prerequisite tasks\n\n### A (by alpha)\n{a_out}"
    c_out = f"# Task: C\n\nDo c.\n\n## Context from prerequisite tasks\n\n### A (by alpha)\n{a_out}"
    d_out = (
        "# Task: D\n\nJoin.\n\n## Context from prerequisite tasks\n\n"
        f"### B (by beta)\n{b_out}\n### C (by gamma)\n{c_out}"
    )
    outputs = {t.id: t.result.output for t in result.tasks if t.result is not None}
    assert outputs == {"a": a_out, "b": b_out, "c": c_out, "d": d_out}
    assert result.success and result.status.code == "ok"
    assert result.output == d_out  # the one task nothing depends on
    assert _overlap(result.task("B"), result.task("C"))

    for task in "abcd":
        events.check_task_order(task)
    for dependency, task in [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]:
        events.check_after(dependency, task)
    start = events.of("task_start")[0]
    assert start == {
        "type": "task_start",
        "agent": "alpha",
        "task": "a",
        "data": {"taskId": "a", "title": "A", "assignee": "alpha", "dependsOn": []},
    }
    (agent_start,) = [e for e in events.of("agent_start") if e["task"] == "d"]
    assert agent_start["data"] == {"prompt": d_out, "taskId": "d", "attempt": 1}
    assert all(e["data"]["taskId"] == e["task"] for e in events.all if e["type"].startswith("task"))

    wire = result.to_wire()
    assert set(wire) == {"runId", "success", "output", "tasks", "tokenUsage"}
    assert wire["runId"] == "diamond"
    assert wire["tokenUsage"] == {"input_tokens": 0, "output_tokens": 0}
    assert [set(t) for t in wire["tasks"]] == [{"id", "title", "assignee", "status", "result"}] * 4
    assert [t["status"] for t in wire["tasks"]] == ["completed"] * 4
    assert live_children() == []


async def test_a_failure_skips_its_dependents_and_unrelated_work_goes_on(tmp_path: Path) -> None:
    events = Events()
    oma = OpenMultiAgent(on_progress=events)
    team = [
        shell("ok", "cat", tmp_path),
        shell("broken", "cat > /dev/null; echo 'disk on fire' >&2; exit 1", tmp_path),
        shell("other", "sleep 0.2; cat", tmp_path),
    ]
    tasks = [
        {"id": "a", "title": "A", "description": "start", "assignee": "ok"},
        {"id": "b", "title": "B", "description": "break", "assignee": "broken", "dependsOn": ["A"]},
        {"id": "c", "title": "C", "description": "after b", "assignee": "ok", "dependsOn": ["B"]},
        {"id": "d", "title": "D", "description": "after c", "assignee": "ok", "dependsOn": ["C"]},
        {"id": "e", "title": "E", "description": "unrelated", "assignee": "other"},
    ]
    with anyio.fail_after(20):
        result = await oma.run_tasks(Team(agents=team), tasks)

    statuses = {t.title: t.status for t in result.tasks}
    assert statuses == {
        "A": "completed",
        "B": "failed",
        "C": "skipped",
        "D": "skipped",
        "E": "completed",
    }
    failed = result.task("B")
    assert failed.result is not None and failed.result.status.code == "error"
    why = failed.result.status.message or ""
    assert 'Process backend "broken" exited with code 1' in why and "disk on fire" in why
    assert result.task("C").reason == 'Skipped: dependency "B" failed.'
    assert result.task("D").reason == 'Skipped: dependency "C" was skipped.'
    assert result.task("C").result is None
    assert not result.success and result.status.code == "error"
    assert result.status.message == f'Task "B" failed: {why}; 2 task(s) skipped'
    assert result.output == "\n".join(
        [
            "# Task: E\n\nunrelated",
            "",
            "## Failed Tasks",
            "### B (FAILED)",
            f"Error: {why}",
            "",
            "## Skipped Tasks",
            "### C (SKIPPED)",
            'Reason: Skipped: dependency "B" failed.',
            "### D (SKIPPED)",
            'Reason: Skipped: dependency "C" was skipped.',
        ]
    )

    events.check_task_order("b", end="task_failed")
    (failed_event,) = events.of("task_failed")
    assert failed_event["data"] == {
        "taskId": "b",
        "title": "B",
        "assignee": "broken",
        "status": "failed",
        "error": why,
    }
    skipped = events.of("task_skipped")
    assert [e["task"] for e in skipped] == ["c", "d"]
    assert skipped[0]["data"]["reason"] == 'Skipped: dependency "B" failed.'
    assert events.index("task_failed", "b") < events.index("task_skipped", "c")
    assert "task_start" not in events.types("c")
    events.check_task_order("e")
    wire_statuses = [t["status"] for t in result.to_wire()["tasks"]]
    assert wire_statuses == ["completed", "failed", "skipped", "skipped", "completed"]


async def test_max_concurrency_is_a_real_limit(tmp_path: Path) -> None:
    team = {name: shell(name, "sleep 0.25; cat", tmp_path) for name in ("p", "q", "r")}
    tasks = [
        {"title": name.upper(), "description": "wait", "assignee": name} for name in ("p", "q", "r")
    ]
    oma = OpenMultiAgent()
    with anyio.fail_after(20):
        serial = await oma.run_tasks(team, tasks, max_concurrency=1)
        paired = await oma.run_tasks(team, tasks, max_concurrency=2)
    assert serial.success and paired.success
    assert _most_at_once(serial) == 1
    assert _most_at_once(paired) == 2


async def test_one_member_works_on_one_task_at_a_time(tmp_path: Path) -> None:
    team = {"solo": shell("solo", "sleep 0.2; cat", tmp_path)}
    tasks = [{"title": f"T{i}", "description": "wait", "assignee": "solo"} for i in range(3)]
    with anyio.fail_after(20):
        result = await OpenMultiAgent().run_tasks(team, tasks, max_concurrency=3)
    assert result.success
    assert _most_at_once(result) == 1


async def test_retryable_failures_are_retried_max_retries_times(tmp_path: Path) -> None:
    events = Events()
    count = tmp_path / "count"
    flaky = f"cat > /dev/null; echo x >> {count}; exit 1"
    heals = f"if [ -f {tmp_path}/healed ]; then cat; else touch {tmp_path}/healed; exit 3; fi"
    team = {"flaky": shell("flaky", flaky, tmp_path), "heals": shell("heals", heals, tmp_path)}
    tasks = [
        {"id": "f", "title": "F", "description": "x", "assignee": "flaky", "maxRetries": 2,
         "retryDelayMs": 10},
        {"id": "h", "title": "H", "description": "y", "assignee": "heals", "maxRetries": 1,
         "retryDelayMs": 10},
    ]  # fmt: skip
    with anyio.fail_after(20):
        result = await OpenMultiAgent(on_progress=events).run_tasks(team, tasks)
    assert count.read_text() == "x\n" * 3
    assert result.task("F").status == "failed" and result.task("F").attempts == 3
    assert result.task("H").status == "completed" and result.task("H").attempts == 2
    retries = [e["data"] for e in events.of("task_retry") if e["task"] == "f"]
    assert [(r["attempt"], r["maxAttempts"]) for r in retries] == [(1, 3), (2, 3)]
    assert all(0 <= r["nextDelayMs"] <= 40 for r in retries)
    events.check_task_order("f", end="task_failed")
    events.check_task_order("h")
    assert events.types("f").count("agent_start") == 3


async def test_terminal_failures_are_not_retried(
    tmp_path: Path, openai_server: FakeProvider, api_key: str
) -> None:
    openai_server.reply(error_reply(400, "bad request: prompt is malformed"))
    calls: list[Any] = []

    def rewrite(ctx: dict[str, Any]) -> dict[str, Any]:
        calls.append(ctx)
        return {**ctx, "messages": [*ctx["messages"], *ctx["messages"]]}

    team = {
        "model": AgentConfig(
            name="model",
            provider="openai",
            model="m",
            base_url=openai_server.base_url,
            api_key_env="OMA_TEST_KEY",
        ),
        "hooked": shell("hooked", f"touch {tmp_path}/spawned; cat", tmp_path, before_run=rewrite),
    }
    tasks = [
        {"title": "Ask", "description": "x", "assignee": "model", "maxRetries": 3,
         "retryDelayMs": 1},
        {"title": "Hook", "description": "y", "assignee": "hooked", "maxRetries": 3,
         "retryDelayMs": 1},
    ]  # fmt: skip
    with anyio.fail_after(20):
        result = await OpenMultiAgent().run_tasks(team, tasks)
    ask, hook = result.task("Ask"), result.task("Hook")
    assert ask.status == "failed" and ask.attempts == 1
    assert ask.result is not None and "HTTP 400" in (ask.result.status.message or "")
    assert len(openai_server.requests) == 1
    assert hook.status == "failed" and hook.attempts == 1 and len(calls) == 1
    assert hook.result is not None and hook.result.error_info is not None
    assert hook.result.error_info.kind == "callback"
    assert not (tmp_path / "spawned").exists()


async def test_an_empty_task_list_succeeds_and_opens_nothing() -> None:
    events = Events()
    with anyio.fail_after(10):
        result = await OpenMultiAgent(on_progress=events).run_tasks({}, [])
    assert result.success and result.tasks == [] and result.output == ""
    assert events.all == []
