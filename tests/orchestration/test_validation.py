"""What team runs refuse before anything runs: bad graphs, bad input, bad rosters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from fake_llm_provider import FakeProvider

from oma_bridge import (
    InvalidMessageError,
    OpenMultiAgent,
    TaskGraphError,
    TaskSpec,
    Team,
    TeamError,
)
from oma_bridge.agent import AgentConfig
from oma_bridge.orchestration.planner import extract_json, read_plan
from oma_bridge.orchestration.tasks import plan_tasks

from .helpers import Events, acp_member, shell

pytestmark = pytest.mark.anyio

STRUCTURED = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def _team(tmp_path: Path) -> dict[str, AgentConfig]:
    """Members that leave a marker behind if they are ever started."""
    return {
        "maker": shell("maker", f"touch {tmp_path}/spawned; cat", tmp_path),
        "coder": acp_member("coder", tmp_path / "acp.log"),
    }


def _task(title: str, assignee: str = "maker", **fields: Any) -> dict[str, Any]:
    return {"title": title, "description": f"do {title}", "assignee": assignee, **fields}


def _nothing_ran(tmp_path: Path, events: Events) -> None:
    assert events.all == []
    assert not (tmp_path / "spawned").exists()
    assert not (tmp_path / "acp.log").exists()


@pytest.mark.parametrize(
    ("tasks", "named", "message"),
    [
        (
            [_task("A", dependsOn=["C"]), _task("B", dependsOn=["A"]), _task("C", dependsOn=["B"])],
            ["A"],
            'Cyclic dependency detected: "A" -> "C" -> "B" -> "A".',
        ),
        ([_task("Build"), _task(" build ", "coder")], ["build"], 'Duplicate task title "build"'),
        (
            [_task("A"), _task("B", dependsOn=["A", "Z"])],
            ["B"],
            'Task "B" depends on unknown task "Z".',
        ),
        (
            [_task("A"), _task("B", "ghost")],
            ["B"],
            'Task "B" is assigned to unknown agent "ghost" (team: coder, maker).',
        ),
        ([_task("A", dependsOn=["A"])], ["A"], 'Task "A" depends on itself.'),
        ([_task("A", id="x"), _task("B", id="x")], ["B"], 'Duplicate task id "x"'),
        ([{"title": "A", "description": "d"}], ["A"], 'Task "A": has no assignee.'),
        ([_task("A", priority="high")], ["A"], 'Task "A" has unknown keys: priority.'),
        ([_task("A", maxRetries=-1)], ["A"], "maxRetries must be an integer >= 0"),
    ],
)
async def test_bad_task_graphs_are_refused_naming_the_task(
    tmp_path: Path, tasks: list[Any], named: list[str], message: str
) -> None:
    events = Events()
    oma = OpenMultiAgent(on_progress=events)
    valid = _task("Fine", "maker")
    with anyio.fail_after(10), pytest.raises(TaskGraphError) as caught:
        await oma.run_tasks(_team(tmp_path), [valid, *tasks])
    assert isinstance(caught.value, ValueError)
    assert message in str(caught.value)
    for title in named:
        assert f'"{title}"' in str(caught.value)
        assert any(title in task for task in caught.value.tasks)
    _nothing_ran(tmp_path, events)
    assert not oma.is_live("any")


def test_every_problem_is_listed_at_once() -> None:
    with pytest.raises(TaskGraphError) as caught:
        plan_tasks([_task("A", "ghost"), _task("B", dependsOn=["Q"]), _task("a")], {"maker"})
    assert caught.value.issues == [
        'Duplicate task title "a" (tasks[0] and tasks[2]).',
        'Task "A" is assigned to unknown agent "ghost" (team: maker).',
        'Task "B" depends on unknown task "Q".',
    ]
    assert caught.value.tasks == ['Task "a"', 'Task "A"', 'Task "B"']


async def test_structured_description_is_refused_before_anything(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        events = Events()
        oma = OpenMultiAgent(on_progress=events)
        tasks: list[Any] = [_task("Fine"), {**_task("Rich", "coder"), "description": STRUCTURED}]
        with pytest.raises(InvalidMessageError) as caught:
            await oma.run_tasks(_team(tmp_path), tasks)
        assert caught.value.code == "INVALID_MESSAGE"
        assert caught.value.path == "tasks[1].description"
        assert str(caught.value).startswith('Task "Rich": description must be a string (got list)')
        spec = TaskSpec(title="Typed", description=STRUCTURED, assignee="maker")  # type: ignore[arg-type]
        with pytest.raises(InvalidMessageError, match="team runs are text-only"):
            await oma.run_tasks(_team(tmp_path), [spec])
        _nothing_ran(tmp_path, events)


async def test_structured_goal_is_refused_before_anything(
    tmp_path: Path, openai_server: FakeProvider, api_key: str
) -> None:
    with anyio.fail_after(10):
        events = Events()
        oma = OpenMultiAgent(on_progress=events)
        lead = AgentConfig(
            name="lead",
            provider="openai",
            model="m",
            base_url=openai_server.base_url,
            api_key_env="OMA_TEST_KEY",
        )
        team = Team(agents=_team(tmp_path), coordinator=lead)
        for goal in (STRUCTURED, [{"type": "text", "text": "hi"}], []):
            with pytest.raises(InvalidMessageError) as caught:
                await oma.run_team(team, goal)  # type: ignore[arg-type]
            assert caught.value.path == "goal"
        assert openai_server.requests == []
        _nothing_ran(tmp_path, events)


async def test_bad_rosters_and_options_are_refused(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        oma = OpenMultiAgent()
        maker = shell("maker", "cat", tmp_path)
        with pytest.raises(TeamError, match='two members of the team are named "maker"'):
            await oma.run_tasks([maker, maker], [])
        with pytest.raises(TeamError, match="must be an Agent or an AgentConfig"):
            await oma.run_tasks({"x": "cat"}, [])  # type: ignore[dict-item]
        with pytest.raises(TeamError, match="max_concurrency must be an integer >= 1"):
            await oma.run_tasks({"maker": maker}, [_task("A")], max_concurrency=0)
        with pytest.raises(TeamError, match='the coordinator "maker" must be an llm agent'):
            await oma.run_team(Team(agents={"maker": maker}, coordinator=maker), "goal")
        with pytest.raises(TeamError, match=r'member "blank": .*needs a model'):
            await oma.run_tasks({"blank": AgentConfig(name="blank")}, [])
        with pytest.raises(TaskGraphError, match="tasks must be a list, got dict"):
            await oma.run_tasks({"maker": maker}, _task("A"))  # type: ignore[arg-type]
        with pytest.raises(TeamError, match="at least one member"):
            await oma.run_team(Team(agents={}), "goal")
        assert not (tmp_path / "spawned").exists()


def test_json_is_found_as_the_reference_finds_it() -> None:
    assert extract_json(' [{"a": 1}] ') == [{"a": 1}]
    assert extract_json('Plan:\n```json\n[{"a": 2}]\n```\nDone.') == [{"a": 2}]
    assert extract_json('Here: {"a": 3} ok') == {"a": 3}
    assert extract_json("so [1, 2] it is") == [1, 2]
    with pytest.raises(ValueError, match="no valid JSON"):
        extract_json("no plan today")


def test_plan_problems_are_reported_for_the_correction_round() -> None:
    roster = ["writer"]
    assert read_plan("nothing", roster) == ([], ["The response contains no valid JSON."])
    assert read_plan("[]", roster)[1] == [
        "The plan must be a non-empty JSON array of task objects."
    ]
    _, issues = read_plan(
        '[{"id": "1", "title": "A", "description": "", "assignee": "writer"},'
        ' {"title": "B", "description": "b", "assignee": "ghost", "dependsOn": ["A"]}]',
        roster,
    )
    assert issues == [
        "tasks[0] has unknown keys: id.",
        "tasks[0].description must be a non-empty string.",
    ]
    _, issues = read_plan(
        '[{"title": "B", "description": "b", "assignee": "ghost", "dependsOn": ["A"]}]', roster
    )
    assert issues == [
        'Task "B" is assigned to unknown agent "ghost" (team: writer).',
        'Task "B" depends on unknown task "A".',
    ]
