"""Cancelling a team run: running tasks end (their processes with them), the rest is skipped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from fake_llm_provider import FakeProvider, Turn

from oma_bridge import OpenMultiAgent, Team, TeamRunResult
from oma_bridge.agent import AgentConfig

from .helpers import Events, acp_member, kill_all, live_children, log_lines, shell, wait_gone

pytestmark = pytest.mark.anyio

HOLD = "echo $$ > {name}.pid; exec sleep 60"


async def _until(condition: Any) -> None:
    while not condition():  # noqa: ASYNC110 - files and logs of other processes
        await anyio.sleep(0.02)


def _pid(path: Path) -> int:
    return int(path.read_text().strip())


def _team(tmp_path: Path) -> dict[str, Any]:
    return {
        "p1": shell("p1", HOLD.format(name="p1"), tmp_path),
        "p2": shell("p2", HOLD.format(name="p2"), tmp_path),
        "p3": shell("p3", f"touch {tmp_path}/p3.ran; cat", tmp_path),
        "warm": acp_member("warm", tmp_path / "warm.log"),
        "waiter": acp_member("waiter", tmp_path / "waiter.log"),
    }


TASKS = [
    {"id": "w", "title": "W", "description": "Warm up.", "assignee": "warm"},
    {"id": "s1", "title": "S1", "description": "Hold.", "assignee": "p1"},
    {"id": "s2", "title": "S2", "description": "Hold.", "assignee": "p2"},
    {"id": "wait", "title": "Wait", "description": "WAIT", "assignee": "waiter"},
    {"id": "after", "title": "After", "description": "x", "assignee": "p3", "dependsOn": ["S1"]},
    {"id": "late", "title": "Late", "description": "y", "assignee": "warm",
     "dependsOn": ["W", "S2"]},
]  # fmt: skip


async def test_cancel_ends_running_tasks_and_skips_the_rest(tmp_path: Path) -> None:
    events = Events()
    oma = OpenMultiAgent(on_progress=events)
    results: list[TeamRunResult] = []
    pids: list[int] = []
    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:

                async def run() -> None:
                    results.append(await oma.run_tasks(_team(tmp_path), TASKS, run_id="team-1"))

                group.start_soon(run)
                await _until(
                    lambda: (
                        (tmp_path / "p1.pid").exists()
                        and (tmp_path / "p2.pid").exists()
                        and log_lines(tmp_path / "waiter.log", "prompt")
                        and "task_complete" in events.types("w")
                    )
                )
                pids = [_pid(tmp_path / "p1.pid"), _pid(tmp_path / "p2.pid")]
                pids += [int(p) for name in ("warm", "waiter")
                         for p in log_lines(tmp_path / f"{name}.log", "start")]  # fmt: skip
                assert oma.is_live("team-1")
                assert oma.cancel("team-1") is True
        (result,) = results
        assert wait_gone(pids)
        assert live_children() == []
    finally:
        kill_all(pids)

    statuses = {task.title: task.status for task in result.tasks}
    assert statuses == {
        "W": "completed",
        "S1": "cancelled",
        "S2": "cancelled",
        "Wait": "cancelled",
        "After": "skipped",
        "Late": "skipped",
    }
    for title in ("S1", "S2", "Wait"):
        task = result.task(title)
        assert task.result is not None and task.result.status.code == "cancelled"
    assert result.task("After").reason == "Skipped: run aborted."
    assert result.task("Late").result is None
    assert not (tmp_path / "p3.ran").exists()
    assert not result.success and result.status.code == "cancelled"
    assert result.status.message == "Run cancelled by caller."
    assert [t["status"] for t in result.to_wire()["tasks"]] == [
        "completed", "cancelled", "cancelled", "cancelled", "skipped", "skipped"
    ]  # fmt: skip
    failed = {e["task"]: e["data"]["status"] for e in events.of("task_failed")}
    assert failed == {"s1": "cancelled", "s2": "cancelled", "wait": "cancelled"}
    assert {e["task"] for e in events.of("task_skipped")} == {"after", "late"}
    for task in ("s1", "s2", "wait"):
        events.check_task_order(task, end="task_failed")
    assert oma.cancel("team-1") is False and not oma.is_live("team-1")


async def test_a_cancelled_scope_leaves_no_process_behind(tmp_path: Path) -> None:
    oma = OpenMultiAgent()
    pids: list[int] = []
    try:
        with anyio.fail_after(30):
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as group:
                    team = _team(tmp_path)
                    group.start_soon(lambda: oma.run_tasks(team, TASKS, run_id="team-2"))
                    await _until(
                        lambda: (
                            (tmp_path / "p1.pid").exists()
                            and log_lines(tmp_path / "waiter.log", "prompt")
                        )
                    )
                    pids = [_pid(tmp_path / "p1.pid")]
                    pids += [int(p) for p in log_lines(tmp_path / "waiter.log", "start")]
                    scope.cancel()
            assert scope.cancelled_caught
        assert wait_gone(pids)
        assert live_children() == []
        assert not oma.is_live("team-2")
    finally:
        kill_all(pids)


async def test_a_run_cancelled_before_it_starts_spawns_nothing(tmp_path: Path) -> None:
    events = Events()
    oma = OpenMultiAgent(on_progress=events)
    results: list[TeamRunResult] = []

    async def cancel_at_first_event(event: dict[str, Any]) -> None:
        events(event)
        oma.cancel("team-3")

    oma.on_progress = cancel_at_first_event
    with anyio.fail_after(20):
        results.append(await oma.run_tasks(_team(tmp_path), TASKS[1:3], run_id="team-3"))
    (result,) = results
    # The first task_start cancels the run: no process was spawned for either task.
    assert not (tmp_path / "p1.pid").exists() and not (tmp_path / "p2.pid").exists()
    assert {task.status for task in result.tasks} <= {"cancelled", "skipped"}
    assert result.status.code == "cancelled"
    for task in result.tasks:
        if task.status == "cancelled":
            events.check_task_order(task.id, end="task_failed")


async def test_cancelling_run_team_mid_way_skips_the_synthesis(
    tmp_path: Path, openai_server: FakeProvider, api_key: str
) -> None:
    lead = AgentConfig(
        name="lead",
        provider="openai",
        model="m",
        base_url=openai_server.base_url,
        api_key_env="OMA_TEST_KEY",
    )
    plan = [
        {"title": "Hold", "description": "Hold.", "assignee": "p1"},
        {"title": "Wait", "description": "WAIT", "assignee": "waiter"},
        {"title": "Then", "description": "x", "assignee": "p3", "dependsOn": ["Hold"]},
    ]
    openai_server.turn(Turn(text=[orjson.dumps(plan).decode()]))
    oma = OpenMultiAgent()
    results: list[TeamRunResult] = []
    pids: list[int] = []
    team = Team(agents=_team(tmp_path), coordinator=lead)
    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:

                async def run() -> None:
                    results.append(await oma.run_team(team, "Hold on.", run_id="team-4"))

                group.start_soon(run)
                await _until(
                    lambda: (
                        (tmp_path / "p1.pid").exists()
                        and log_lines(tmp_path / "waiter.log", "prompt")
                    )
                )
                pids = [_pid(tmp_path / "p1.pid")]
                pids += [int(p) for p in log_lines(tmp_path / "waiter.log", "start")]
                assert oma.cancel("team-4")
        assert wait_gone(pids)
        assert live_children() == []
    finally:
        kill_all(pids)
    (result,) = results
    assert [t.status for t in result.tasks] == ["cancelled", "cancelled", "skipped"]
    assert result.status.code == "cancelled" and not result.success
    assert len(openai_server.requests) == 1  # the plan only: no synthesis
    assert result.output == "\n".join(
        [
            "## Skipped Tasks",
            "### Then (SKIPPED)",
            "Reason: Skipped: run aborted.",
            "",
            "## Cancelled Tasks",
            "### Hold (CANCELLED)",
            "Reason: Run cancelled by caller.",
            "### Wait (CANCELLED)",
            "Reason: Run cancelled by caller.",
        ]
    )
