"""oma/runTasks and oma/runTeam end to end: a real daemon, real sockets, real processes."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import orjson
import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "llm"))

from fake_llm_provider import FakeProvider, Turn
from orchestration.helpers import gone, kill_all, live_children
from websockets.asyncio.client import unix_connect

from oma_bridge.client import DaemonError, TeamResult, connect
from oma_bridge.errors import InvalidMessageError
from oma_bridge.orchestration.tasks import TaskSpec

from .conftest import daemon

pytestmark = pytest.mark.anyio

SCENARIO_AGENT = Path(__file__).resolve().parent.parent / "agents" / "acp_scenario_agent.py"
STRUCTURED = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def agents(folder: Path, extra: str = "") -> str:
    """Process profiles for the tests; ``marker`` proves whether anything was spawned."""
    return f"""
[agents.cat]
kind = "process"
command = "cat"

[agents.left]
kind = "process"
command = "sh"
args = ["-c", "sleep 0.3; cat"]

[agents.right]
kind = "process"
command = "sh"
args = ["-c", "sleep 0.3; cat"]

[agents.failing]
kind = "process"
command = "sh"
args = ["-c", "cat > /dev/null; echo broken >&2; exit 1"]

[agents.marker]
kind = "process"
command = "sh"
args = ["-c", "touch '{folder}/spawned'; cat"]

[agents.sleeper]
kind = "process"
command = "{sys.executable}"
args = ["-c", "import time; print('started', flush=True); time.sleep(60)"]

[agents.sleeper2]
kind = "process"
command = "{sys.executable}"
args = ["-c", "import time; print('started', flush=True); time.sleep(60)"]

[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"
{extra}"""


def task(title: str, assignee: str, *deps: str, **more: Any) -> dict[str, Any]:
    return {
        "title": title,
        "description": f"do {title}",
        "assignee": assignee,
        "dependsOn": list(deps),
        **more,
    }


def prompt(title: str, *context: tuple[str, str, str]) -> str:
    """The library's task prompt (docs/teams.md, "Prompt layouts")."""
    text = f"# Task: {title}\n\ndo {title}"
    if context:
        text += "\n\n## Context from prerequisite tasks\n\n" + "\n".join(
            f"### {dep} (by {assignee})\n{output}" for dep, assignee, output in context
        )
    return text


class Progress:
    """Every oma/progress event of one team run, with checks of their order."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def types(self) -> list[str]:
        return [event["type"] for event in self.events]

    def of_task(self, task_id: str) -> list[str]:
        return [e["type"] for e in self.events if e.get("task") == task_id]

    def index(self, kind: str, task_id: str) -> int:
        (found,) = [
            i for i, e in enumerate(self.events) if e["type"] == kind and e.get("task") == task_id
        ]
        return found

    def check_task(self, task_id: str, end: str) -> None:
        assert self.of_task(task_id) == ["task_start", "agent_start", "agent_complete", end]
        for event in self.events:
            if event.get("task") == task_id and event["type"].startswith("task_"):
                assert event["data"]["taskId"] == task_id


def spawned(folder: Path) -> bool:
    return (folder / "spawned").exists()


async def test_a_diamond_on_process_profiles(short_dir: Path) -> None:
    tasks = [
        task("A", "cat"),
        task("B", "left", "A"),
        task("C", "right", "a"),  # titles match case-insensitively
        task("D", "cat", "B", "C"),
    ]
    async with daemon(short_dir, agents=agents(short_dir)), connect(discovery_dir=short_dir) as c:
        with anyio.fail_after(30):
            async with c.tasks_run(tasks, max_concurrency=2, run_id="diamond") as run:
                progress = Progress()
                async for event in run.progress():
                    progress(event)
                result = await run.result()

    assert result.success and result.run_id == "diamond"
    assert [(t.title, t.assignee, t.status) for t in result.tasks] == [
        ("A", "cat", "completed"),
        ("B", "left", "completed"),
        ("C", "right", "completed"),
        ("D", "cat", "completed"),
    ]
    a_out = prompt("A")
    b_out = prompt("B", ("A", "cat", a_out))
    c_out = prompt("C", ("A", "cat", a_out))
    # cat echoes its prompt: D's output is D's prompt, B's and C's outputs laid out.
    d_out = prompt("D", ("B", "left", b_out), ("C", "right", c_out))
    outputs = {t.title: t.result.output for t in result.tasks if t.result is not None}
    assert outputs == {"A": a_out, "B": b_out, "C": c_out, "D": d_out}
    assert result.output == d_out  # the one task nothing depends on
    a, b, c_, d = (t.id for t in result.tasks)
    for task_id in (a, b, c_, d):
        progress.check_task(task_id, "task_complete")
    for dependency, dependent in ((a, b), (a, c_), (b, d), (c_, d)):
        assert progress.index("task_complete", dependency) < progress.index("task_start", dependent)
    # B and C ran at the same time: each started before the other ended.
    assert progress.index("task_start", c_) < progress.index("task_complete", b)
    assert progress.index("task_start", b) < progress.index("task_complete", c_)
    start = progress.events[progress.index("task_start", d)]
    assert start == {
        "type": "task_start",
        "agent": "cat",
        "task": d,
        "data": {"taskId": d, "title": "D", "assignee": "cat", "dependsOn": [b, c_]},
    }
    complete = progress.events[progress.index("agent_complete", d)]
    assert complete["data"]["output"] == d_out and complete["data"]["success"] is True


async def test_a_failing_task_skips_its_dependents_only(short_dir: Path) -> None:
    tasks = [
        task("Break", "failing"),
        task("Next", "cat", "Break"),
        task("Last", "cat", "Next"),
        task("Other", "echo"),
    ]
    progress = Progress()
    async with daemon(short_dir, agents=agents(short_dir)), connect(discovery_dir=short_dir) as c:
        with anyio.fail_after(30):
            result = await c.run_tasks(tasks, on_progress=progress)

    assert result.success is False
    assert [(t.title, t.status) for t in result.tasks] == [
        ("Break", "failed"),
        ("Next", "skipped"),
        ("Last", "skipped"),
        ("Other", "completed"),
    ]
    broken, nxt, last, other = result.tasks
    assert broken.result is not None and not broken.result.success
    assert nxt.result is None and last.result is None
    progress.check_task(broken.id, "task_failed")
    progress.check_task(other.id, "task_complete")
    failed = progress.events[progress.index("task_failed", broken.id)]
    assert failed["data"]["status"] == "failed"
    assert 'Process backend "failing" exited with code 1: broken' in failed["data"]["error"]
    skipped = [e for e in progress.events if e["type"] == "task_skipped"]
    assert [e["data"]["title"] for e in skipped] == ["Next", "Last"]
    assert skipped[0]["data"]["reason"] == 'Skipped: dependency "Break" failed.'
    assert skipped[1]["data"]["reason"] == 'Skipped: dependency "Next" was skipped.'
    assert progress.index("task_failed", broken.id) < progress.index("task_skipped", nxt.id)
    assert "## Failed Tasks\n### Break (FAILED)" in result.output
    assert "## Skipped Tasks\n### Next (SKIPPED)" in result.output


@pytest.mark.parametrize(
    ("tasks", "issues"),
    [
        (
            [task("A", "marker", "B"), task("B", "cat", "A")],
            ['Cyclic dependency detected: "A" -> "B" -> "A".'],
        ),
        (
            [task("A", "marker"), task("a ", "cat")],
            ['Duplicate task title "a" (tasks[0] and tasks[1]).'],
        ),
        (
            [task("A", "marker"), task("B", "cat", "Nope")],
            ['Task "B" depends on unknown task "Nope".'],
        ),
        (
            [task("A", "marker"), task("B", "ghost")],
            ['Task "B" is assigned to unknown agent "ghost" (team: cat, echo, failing, '],
        ),
    ],
    ids=["cycle", "duplicate-title", "unknown-dependency", "unknown-assignee"],
)
async def test_a_bad_graph_is_refused_before_anything_runs(
    short_dir: Path, tasks: list[dict[str, Any]], issues: list[str]
) -> None:
    progress = Progress()
    async with daemon(short_dir, agents=agents(short_dir)), connect(discovery_dir=short_dir) as c:
        with anyio.fail_after(30), pytest.raises(DaemonError) as caught:
            await c.run_tasks(tasks, on_progress=progress)
        assert caught.value.rpc_code == -32602
        errors = caught.value.data["errors"]
        assert [error["loc"] for error in errors] == [["tasks"]] * len(issues)
        for error, issue in zip(errors, issues, strict=True):
            assert error["msg"].startswith(issue)
        assert (await c.status())["runs"] == []
    assert progress.events == []
    assert not spawned(short_dir)


async def test_structured_text_is_refused_before_anything_happens(short_dir: Path) -> None:
    """-32010 for a description or a goal that is an LLMMessage[]: no frame but the answer."""
    bad_tasks = [task("A", "marker"), {**task("B", "marker"), "description": STRUCTURED}]
    requests = [
        ("oma/runTasks", {"tasks": bad_tasks}),
        ("oma/runTasks", {"tasks": [{**task("A", "marker"), "description": STRUCTURED[0]}]}),
        (
            "oma/runTeam",
            {"team": {"agents": ["marker"], "coordinator": "echo"}, "goal": STRUCTURED},
        ),
    ]
    async with daemon(short_dir, agents=agents(short_dir)):
        sock = str(short_dir / "bridge.sock")
        answers = []
        async with unix_connect(sock, "ws://localhost/", compression=None) as ws:
            init = {"protocolVersion": 1, "clientInfo": {"name": "t", "version": "0"}}
            await ws.send(_frame(0, "initialize", init))
            await ws.recv()
            for number, (method, params) in enumerate(requests, start=1):
                await ws.send(_frame(number, method, params))
                with anyio.fail_after(10):
                    answer = orjson.loads(await ws.recv())  # the very next frame: no progress
                assert answer["id"] == number, answer
                answers.append(answer["error"])
            with anyio.move_on_after(0.3) as quiet:
                stray = await ws.recv()
            assert quiet.cancelled_caught, stray  # no oma/progress, then or later
        for error in answers:
            assert error["code"] == -32010, error
            assert error["data"] == {
                "name": "InvalidMessageError",
                "code": "INVALID_MESSAGE",
                "message": error["message"],
                "details": error["message"],
            }
        assert answers[0]["message"].startswith('Task "B": description must be a string (got list)')
        assert answers[1]["message"].startswith('Task "A": description must be a string (got dict)')
        assert answers[2]["message"].startswith("goal must be a string (got list)")
        async with connect(discovery_dir=short_dir) as c:
            with pytest.raises(InvalidMessageError, match=r"^goal must be a string \(got list\)"):
                await c.run_team(["marker"], "echo", STRUCTURED)  # type: ignore[arg-type]
            async with c.tasks_run(bad_tasks) as run:
                assert [event async for event in run.progress()] == []
                with pytest.raises(InvalidMessageError, match=r'^Task "B": description must'):
                    await run.result()
            # Not asked for in the block: the refusal is raised when the block ends.
            with pytest.raises(InvalidMessageError):
                async with c.tasks_run(bad_tasks):
                    pass
    assert not spawned(short_dir)


def _frame(number: int, method: str, params: Any) -> str:
    return orjson.dumps(
        {"jsonrpc": "2.0", "id": number, "method": method, "params": params}
    ).decode()


@pytest.fixture
async def openai_server() -> AsyncIterator[FakeProvider]:
    server = FakeProvider("openai")
    async with server.running():
        yield server
    assert server.violations == [], server.violations


def _lead(server: FakeProvider, folder: Path) -> str:
    extra = f"""
[agents.lead]
kind = "llm"
provider = "openai"
model = "m"
base_url = "{server.base_url}"
api_key_env = "OMA_TEST_KEY"
description = "Plans and writes the answer."
"""
    return agents(folder, extra)


def _plan(*tasks: dict[str, Any]) -> Turn:
    return Turn(text=[orjson.dumps(list(tasks)).decode()])


async def test_run_team_plans_runs_and_synthesises(
    short_dir: Path, openai_server: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMA_TEST_KEY", "sk-test-teams-0123456789")
    openai_server.turn(
        _plan(
            {"title": "Draft", "description": "Write the draft.", "assignee": "cat"},
            {
                "title": "Check",
                "description": "Check the draft.",
                "assignee": "left",
                "dependsOn": ["Draft"],
            },
        ),
        Turn(text=["Drafted and checked."], usage=(30, 4)),
    )
    async with (
        daemon(short_dir, agents=_lead(openai_server, short_dir)),
        connect(discovery_dir=short_dir) as c,
    ):
        with anyio.fail_after(30):
            async with c.team_run(["cat", "left"], "lead", "Write a note.") as run:
                progress = Progress()
                async for event in run.progress():
                    progress(event)
                result = await run.result()

    assert result.success, result.output
    assert result.output == "Drafted and checked."
    assert [(t.title, t.assignee, t.status) for t in result.tasks] == [
        ("Draft", "cat", "completed"),
        ("Check", "left", "completed"),
    ]
    system, user = openai_server.requests[0].body["messages"]
    assert '"name": "cat",\n    "kind": "process"' in system["content"]
    assert user["content"].startswith(
        "Decompose the following goal into tasks for your team (cat, left).\n\n## Goal\n"
        "Write a note."
    )
    draft = "# Task: Draft\n\nWrite the draft."
    synthesis = openai_server.requests[1].body["messages"][-1]["content"]
    assert f"### Draft (completed by cat)\n{draft}\n" in synthesis
    coordinator = [e for e in progress.events if e["agent"] == "lead"]
    assert [(e["type"], e["data"].get("phase")) for e in coordinator] == [
        ("agent_start", "decomposition"),
        ("agent_complete", None),
        ("agent_start", "synthesis"),
        ("agent_complete", None),
    ]
    assert progress.types().count("task_complete") == 2
    assert result.token_usage.input_tokens >= 30


async def test_run_team_with_a_malformed_plan_fails_clearly(
    short_dir: Path, openai_server: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMA_TEST_KEY", "sk-test-teams-0123456789")
    openai_server.turn(Turn(text=["Sure! Here is my plan: first..."]), Turn(text=["Still no."]))
    progress = Progress()
    async with (
        daemon(short_dir, agents=_lead(openai_server, short_dir)),
        connect(discovery_dir=short_dir) as c,
    ):
        with anyio.fail_after(30):
            result = await c.run_team(["marker"], "lead", "Plan it.", on_progress=progress)
        with pytest.raises(DaemonError) as not_llm:
            await c.run_team(["marker"], "cat", "Plan it.")
        with pytest.raises(DaemonError) as unknown:
            await c.run_team(["ghost"], "lead", "Plan it.")
    assert result.success is False and result.tasks == ()
    assert result.output == (
        "Coordinator plan failed validation after repair: The response contains no valid JSON."
    )
    assert [e["data"].get("phase") for e in progress.events if e["type"] == "agent_start"] == [
        "decomposition",
        "repair",
    ]
    assert not_llm.value.rpc_code == -32602
    assert not_llm.value.data["errors"][0]["msg"] == (
        'the coordinator "cat" must be an llm profile, not process'
    )
    assert unknown.value.rpc_code == -32011
    assert not spawned(short_dir)


async def _ended(pids: list[int]) -> None:
    """Wait (without blocking the daemon's loop) until every pid is gone."""
    with anyio.fail_after(10):
        while not all(gone(pid) for pid in pids):  # noqa: ASYNC110 - polling the processes
            await anyio.sleep(0.02)


def _team_processes(status: dict[str, Any], run_id: str) -> list[int]:
    """The team run's processes: a process member's carry its run, ``<runId>:<task>:<n>``."""
    return [
        p["pid"]
        for p in status["processes"]
        if p.get("runId", "").partition(":")[0] == run_id and p["agentId"] is None
    ]


async def test_run_cancel_ends_the_running_tasks_and_skips_the_rest(short_dir: Path) -> None:
    tasks = [
        task("Long", "sleeper"),
        task("Longer", "sleeper2"),
        task("After", "marker", "Long"),
    ]
    pids: list[int] = []
    try:
        async with (
            daemon(short_dir, agents=agents(short_dir)),
            connect(discovery_dir=short_dir) as c,
        ):
            with anyio.fail_after(30):
                async with c.tasks_run(tasks, run_id="team-cancel") as run:
                    while len(pids) < 2:
                        status = await c.status()
                        pids = _team_processes(status, "team-cancel")
                        await anyio.sleep(0.05)
                    (row,) = status["runs"]
                    assert row["runId"] == "team-cancel" and row["method"] == "oma/runTasks"
                    assert all(psutil.pid_exists(pid) for pid in pids)
                    assert await run.cancel() is True
                    result = await run.result()
                assert await c.cancel("team-cancel") is False  # over
                assert _team_processes(await c.status(), "team-cancel") == []
        assert [(t.title, t.status) for t in result.tasks] == [
            ("Long", "cancelled"),
            ("Longer", "cancelled"),
            ("After", "skipped"),
        ]
        assert result.success is False
        await _ended(pids)
        assert live_children() == []
        assert not spawned(short_dir)
    finally:
        kill_all(pids)


async def test_a_team_run_cancelled_while_queued_spawns_nothing(short_dir: Path) -> None:
    async with (
        daemon(short_dir, server="max_concurrent_runs = 1", agents=agents(short_dir)),
        connect(discovery_dir=short_dir) as c,
    ):
        blocker = await c.open("sleeper")
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: blocker.run("z", run_id="blocker"))
            with anyio.fail_after(30):
                while not (await c.status())["processes"]:  # noqa: ASYNC110 - polling the daemon
                    await anyio.sleep(0.05)
                async with c.tasks_run([task("A", "marker"), task("B", "cat", "A")]) as run:
                    while not [r for r in (await c.status())["runs"] if r["startedAt"] is None]:  # noqa: ASYNC110
                        await anyio.sleep(0.05)
                    assert await run.cancel() is True
                    result = await run.result()
                await c.cancel("blocker")
    assert [(t.title, t.status) for t in result.tasks] == [("A", "skipped"), ("B", "skipped")]
    assert result.success is False
    assert "## Skipped Tasks\n### A (SKIPPED)\nReason: Skipped: run aborted." in result.output
    assert not spawned(short_dir)


async def test_on_disconnect_continue_keeps_the_team_run_going(short_dir: Path) -> None:
    async with daemon(short_dir, agents=agents(short_dir)):
        async with connect(discovery_dir=short_dir) as first:
            call = await first.peer.start_request(
                "oma/runTasks",
                {
                    "tasks": [task("A", "left"), task("B", "marker", "A")],
                    "runId": "kept",
                    "onDisconnect": "continue",
                },
            )
            with anyio.fail_after(10):
                while not (await first.status())["runs"]:  # noqa: ASYNC110
                    await anyio.sleep(0.02)
            assert not call.settled
        async with connect(discovery_dir=short_dir) as second:
            with anyio.fail_after(30):
                while True:
                    try:
                        summary = await second.request("run/result", {"runId": "kept"})
                        break
                    except DaemonError as error:
                        assert error.rpc_code == -32014  # still running
                        await anyio.sleep(0.05)
    assert summary["success"] is True and summary["status"] == {"code": "ok"}
    assert summary["output"].startswith("# Task: B\n\ndo B\n\n## Context")
    assert spawned(short_dir)


async def test_acp_members_ask_the_calling_connection(short_dir: Path) -> None:
    extra = f"""
[agents.scenario]
kind = "acp"
command = "{sys.executable}"
args = ["{SCENARIO_AGENT}"]
fs = "none"
"""
    asked: list[Any] = []

    async def allow(request: Any) -> str:
        asked.append(request)
        return str(request.options[0].option_id)

    async with (
        daemon(short_dir, agents=agents(short_dir, extra)),
        connect(discovery_dir=short_dir, permission_handler=allow) as c,
    ):
        with anyio.fail_after(30):
            result = await c.run_tasks(
                [TaskSpec(title="Use a tool", description="tools", assignee="scenario")],
                run_id="acp-team",
            )
    assert result.success, result.output
    (request,) = asked
    assert request.run_id.startswith("acp-team:")
    assert result.tasks[0].result is not None
    assert result.tasks[0].result.output.startswith("permission:")
    assert live_children() == []


async def test_the_result_object(short_dir: Path) -> None:
    async with daemon(short_dir, agents=agents(short_dir)), connect(discovery_dir=short_dir) as c:
        with anyio.fail_after(30):
            result = await c.run_tasks([task("A", "cat", id="a-1")], run_id="obj")
            empty = await c.run_tasks([])
    assert isinstance(result, TeamResult)
    assert result.task("a-1") is result.task("A")
    assert result.wire["tasks"][0]["id"] == "a-1"
    assert empty.success and empty.tasks == () and empty.output == ""
    with pytest.raises(KeyError):
        result.task("missing")


async def test_leaving_the_block_with_an_error_cancels_the_run(short_dir: Path) -> None:
    pids: list[int] = []
    try:
        async with (
            daemon(short_dir, agents=agents(short_dir)),
            connect(discovery_dir=short_dir) as c,
        ):
            with anyio.fail_after(30):
                with pytest.raises(LookupError):
                    async with c.tasks_run([task("Long", "sleeper")], run_id="left") as run:
                        async for event in run.progress():
                            if event["type"] == "agent_start":
                                while not pids:
                                    pids = _team_processes(await c.status(), "left")
                                    await anyio.sleep(0.05)
                                raise LookupError("the caller gave up")
                await _ended(pids)
                while (await c.status())["runs"]:  # noqa: ASYNC110 - polling the daemon
                    await anyio.sleep(0.05)
                assert await c.cancel("left") is False  # over
        assert live_children() == []
    finally:
        kill_all(pids)


async def test_closing_the_connection_cancels_the_team_run(short_dir: Path) -> None:
    pids: list[int] = []
    try:
        async with (
            daemon(short_dir, agents=agents(short_dir)),
            connect(discovery_dir=short_dir) as watcher,
        ):
            with anyio.fail_after(30):
                async with connect(discovery_dir=short_dir) as c:
                    tasks = [task("Long", "sleeper"), task("After", "marker", "Long")]
                    await c.peer.start_request("oma/runTasks", {"tasks": tasks, "runId": "gone"})
                    while not pids:
                        pids = _team_processes(await watcher.status(), "gone")
                        await anyio.sleep(0.05)
                await _ended(pids)
                while (await watcher.status())["runs"]:  # noqa: ASYNC110 - polling the daemon
                    await anyio.sleep(0.05)
        assert live_children() == []
        assert not spawned(short_dir)
    finally:
        kill_all(pids)
