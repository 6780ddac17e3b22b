"""OpenMultiAgent.run_team: an OpenAI-compatible coordinator on 127.0.0.1, real members."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from fake_llm_provider import FakeProvider, Turn, error_reply

from oma_bridge import OpenMultiAgent, Team
from oma_bridge.agent import AgentConfig

from .helpers import Events, acp_member, gone, live_children, log_lines, shell

pytestmark = pytest.mark.anyio


def _lead(server: FakeProvider, **fields: Any) -> AgentConfig:
    return AgentConfig(
        name="lead",
        provider="openai",
        model="m",
        base_url=server.base_url,
        api_key_env="OMA_TEST_KEY",
        **fields,
    )


def _plan(*tasks: dict[str, Any]) -> Turn:
    return Turn(text=[orjson.dumps(list(tasks)).decode()])


def _messages(server: FakeProvider, index: int) -> list[dict[str, Any]]:
    return server.requests[index].body["messages"]  # type: ignore[no-any-return]


async def test_a_plan_runs_and_is_synthesised_with_one_acp_session(
    tmp_path: Path, openai_server: FakeProvider, api_key: str
) -> None:
    log = tmp_path / "acp.log"
    team = Team(
        agents={
            "writer": shell("writer", "cat", tmp_path, description="Writes drafts."),
            "coder": acp_member("coder", log, system_prompt="You are a coder.\nShip it."),
        },
        coordinator=_lead(openai_server),
    )
    openai_server.turn(
        _plan(
            {"title": "Draft", "description": "Write the draft.", "assignee": "writer"},
            {
                "title": "Code",
                "description": "Implement the draft.",
                "assignee": "coder",
                "dependsOn": ["Draft"],
            },
            {
                "title": "Test",
                "description": "Test it.",
                "assignee": "coder",
                "dependsOn": ["code"],
            },
        ),
        Turn(text=["All done: drafted, coded, tested."], usage=(40, 8)),
    )
    events = Events()
    with anyio.fail_after(30):
        result = await OpenMultiAgent(on_progress=events).run_team(team, "Ship a feature.")

    assert result.success, result.status
    assert result.output == "All done: drafted, coded, tested."
    assert [(t.title, t.assignee, t.status) for t in result.tasks] == [
        ("Draft", "writer", "completed"),
        ("Code", "coder", "completed"),
        ("Test", "coder", "completed"),
    ]
    # Decomposition: the roster in the system prompt, the goal in the user turn.
    system, user = _messages(openai_server, 0)
    assert system["role"] == "system" and "## Team Roster" in system["content"]
    writer = '"name": "writer",\n    "kind": "process",\n    "roleSummary": "Writes drafts."'
    assert writer in system["content"]
    assert '"roleSummary": "You are a coder."' in system["content"]
    assert user == {
        "role": "user",
        "content": "Decompose the following goal into tasks for your team (writer, coder).\n\n"
        "## Goal\nShip a feature.\n\n"
        "Return ONLY the JSON task array. Do not use a Markdown code fence.",
    }
    # One ACP session for both of the coder's tasks; the system prompt went once.
    (session,) = log_lines(log, "new")
    assert log_lines(log, "prompt") == [f"{session} 1", f"{session} 2"]
    code, test = result.task("Code").result, result.task("Test").result
    assert code is not None and test is not None
    draft = "# Task: Draft\n\nWrite the draft."
    code_prompt = (
        "# Task: Code\n\nImplement the draft.\n\n## Context from prerequisite tasks\n\n"
        f"### Draft (by writer)\n{draft}"
    )
    assert code.output == f"session={session} turn=1\nYou are a coder.\nShip it.\n\n{code_prompt}"
    assert test.output.startswith(f"session={session} turn=2\n# Task: Test\n\nTest it.\n\n")
    # Synthesis: every completed task's output in plan order.
    synthesis = _messages(openai_server, 1)[-1]["content"]
    assert synthesis == "\n".join(
        [
            "## Original Goal",
            "Ship a feature.",
            "",
            "## Task Results",
            "### Draft (completed by writer)",
            draft,
            "### Code (completed by coder)",
            code.output,
            "### Test (completed by coder)",
            test.output,
            "",
            "## Your Task",
            "Synthesise the above results into a comprehensive final answer that addresses"
            " the original goal.",
            "If some tasks failed or were skipped, note any gaps in the result.",
        ]
    )
    assert len(openai_server.requests) == 2
    assert result.token_usage.to_wire() == {"input_tokens": 50, "output_tokens": 13}
    assert [r.output for r in result.coordinator][1] == result.output
    lead_events = [
        (e["type"], e["data"].get("phase") if isinstance(e["data"], dict) else None)
        for e in events.all
        if e["agent"] == "lead"
    ]
    assert lead_events[0] == ("agent_start", "decomposition")
    assert [kind for kind, _ in lead_events] == ["agent_start", "agent_complete"] * 2
    assert lead_events[2] == ("agent_start", "synthesis")
    assert events.all[-1]["agent"] == "lead" and events.all[-1]["type"] == "agent_complete"
    (start,) = log_lines(log, "start")
    assert gone(int(start))  # the run closed the ACP agent it opened
    assert live_children() == []


async def test_a_plan_naming_an_unknown_member_gets_a_correction_round(
    tmp_path: Path, openai_server: FakeProvider, api_key: str
) -> None:
    team = Team(agents=[shell("writer", "cat", tmp_path)], coordinator=_lead(openai_server))
    openai_server.turn(
        _plan({"title": "Draft", "description": "Write.", "assignee": "ghost"}),
        _plan({"title": "Draft", "description": "Write.", "assignee": "writer"}),
        Turn(text=["Final."]),
    )
    with anyio.fail_after(20):
        result = await OpenMultiAgent().run_team(team, "Write something.")
    assert result.success and result.output == "Final."
    assert [t.title for t in result.tasks] == ["Draft"]
    repair = _messages(openai_server, 1)
    assert repair[2] == {
        "role": "assistant",
        "content": '[{"title":"Draft","description":"Write.","assignee":"ghost"}]',
    }
    assert repair[3] == {
        "role": "user",
        "content": "Your previous response did not produce valid JSON matching the required"
        ' schema.\n\nError: Task "Draft" is assigned to unknown agent "ghost" (team: writer).'
        "\n\nPlease try again. Respond with ONLY valid JSON, no other text.",
    }


async def test_a_plan_still_malformed_after_the_correction_round_fails_clearly(
    tmp_path: Path, openai_server: FakeProvider, api_key: str
) -> None:
    team = Team(
        agents={"writer": shell("writer", f"touch {tmp_path}/spawned; cat", tmp_path)},
        coordinator=_lead(openai_server),
    )
    openai_server.turn(Turn(text=["I would rather chat."]), Turn(text=['[{"title": "x"}]']))
    events = Events()
    with anyio.fail_after(20):
        result = await OpenMultiAgent(on_progress=events).run_team(team, "Do it.")
    assert not result.success and result.tasks == []
    assert result.status.code == "error"
    assert result.output == (
        "Coordinator plan failed validation after repair: "
        "tasks[0].description must be a non-empty string. "
        "tasks[0].assignee must be a non-empty string."
    )
    assert result.status.message == result.output
    first_error = _messages(openai_server, 1)[-1]["content"]
    assert "Error: The response contains no valid JSON." in first_error
    assert len(openai_server.requests) == 2
    assert not (tmp_path / "spawned").exists()
    assert [e["type"] for e in events.all] == ["agent_start", "agent_complete"] * 2
    assert result.to_wire()["tasks"] == []


async def test_a_failing_coordinator_fails_the_run(
    tmp_path: Path, openai_server: FakeProvider, api_key: str
) -> None:
    team = Team(agents=[shell("writer", "cat", tmp_path)], coordinator=_lead(openai_server))
    openai_server.reply(error_reply(401, "invalid api key"))
    with anyio.fail_after(20):
        result = await OpenMultiAgent().run_team(team, "Do it.")
    assert not result.success and result.tasks == []
    assert result.output.startswith("Coordinator decomposition failed: ")
    assert "HTTP 401" in result.output
    assert len(openai_server.requests) == 1  # no correction round for a failed call


async def test_failed_tasks_reach_the_synthesis(
    tmp_path: Path, openai_server: FakeProvider, api_key: str
) -> None:
    team = Team(
        agents={
            "writer": shell("writer", "cat", tmp_path),
            "broken": shell("broken", "cat >/dev/null; echo nope >&2; exit 2", tmp_path),
        },
        coordinator=_lead(openai_server),
    )
    openai_server.turn(
        _plan(
            {"title": "Break", "description": "b", "assignee": "broken"},
            {"title": "After", "description": "a", "assignee": "writer", "dependsOn": ["Break"]},
            {"title": "Alone", "description": "c", "assignee": "writer"},
        ),
        Turn(text=["Partial answer; Break failed."]),
    )
    with anyio.fail_after(20):
        result = await OpenMultiAgent().run_team(team, "Goal.")
    assert not result.success and result.status.code == "error"
    assert result.output == "Partial answer; Break failed."
    broken = result.task("Break").result
    assert broken is not None
    synthesis = _messages(openai_server, 1)[-1]["content"]
    assert (
        "## Task Results\n### Alone (completed by writer)\n# Task: Alone\n\nc\n\n"
        f"## Failed Tasks\n### Break (FAILED)\nError: {broken.status.message}\n\n"
        '## Skipped Tasks\n### After (SKIPPED)\nReason: Skipped: dependency "Break" failed.\n\n'
        "## Your Task\n"
    ) in synthesis
