"""A team (``oma/runTasks``) whose tasks run on A's local profiles and on B's, through A."""

from __future__ import annotations

import pytest

from oma_bridge.client import connect

from .harness import Pair

pytestmark = pytest.mark.anyio


async def test_run_tasks_on_local_and_remote_profiles(pair: Pair) -> None:
    tasks = [
        {"title": "Draft", "description": "three words here", "assignee": "echo"},
        {"title": "Count", "description": "count them", "assignee": "wordcount"},
        {
            "title": "Relay",
            "description": "pass it on",
            "assignee": "remote",
            "dependsOn": ["Draft"],
        },
    ]
    async with connect(socket=pair.a.discovery()["socket"]) as client:
        result = await client.run_tasks(tasks)
        assert result.success, result.wire
        by_title = {task.title: task for task in result.tasks}
        assert {title: task.status for title, task in by_title.items()} == {
            "Draft": "completed",
            "Count": "completed",
            "Relay": "completed",
        }
        relay = by_title["Relay"].result
        assert relay is not None and relay.success
        # B's demo agent got the task's prompt, the Draft's output in it (a dependency).
        assert relay.output.startswith("You said: ")
        assert "three words here" in relay.output
        assert "This is turn 1 of session demo-" in relay.output
        assert (await client.status())["runs"] == []
    # The task's agent was closed with its run, and its session on B with it (session/close).
    async with connect(socket=pair.b.discovery()["socket"]) as b:
        assert (await b.status())["agents"] == []
