"""Every agent method of the contract, end to end through a real unix socket."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from process.conftest import gone, kill_all, tree_pids

from oma_bridge.client import DaemonError, connect
from oma_bridge.errors import InvalidMessageError
from oma_bridge.results import AgentRunResult

from .conftest import AGENTS, daemon

pytestmark = pytest.mark.anyio

PNG = "iVBORw0KGgo="
STRUCTURED = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is shown here?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        ],
    }
]


async def test_echo_run_stream_prompt_history_reset_close(short_dir: Path) -> None:
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        assert client.profiles[0] == {
            "name": "echo",
            "kind": "llm",
            "ready": True,
            "model": "echo-1",
        }
        agent = await client.open("echo")
        result = await agent.run(STRUCTURED, run_id="r-1")
        assert result.output == "What is shown here? [image:image/png]"
        assert result.run_id == "r-1" and result.success
        stream = agent.stream("one two")
        events = [event async for event in stream]
        assert [e.type for e in events] == ["text", "text", "done"]
        assert "".join(e.data for e in events[:-1]) == "one two"
        assert isinstance(events[-1].data, AgentRunResult)
        assert stream.result is not None and stream.result.to_wire() == events[-1].data.to_wire()
        await agent.prompt("remember me")
        history = await agent.history()
        assert history[0] == {"role": "user", "content": [{"type": "text", "text": "remember me"}]}
        assert history[1]["role"] == "assistant"
        await agent.reset()
        assert await agent.history() == []
        await agent.close()
        with pytest.raises(DaemonError) as caught:
            await agent.run("gone")
        assert caught.value.rpc_code == -32011
        assert caught.value.data == {"name": "NotFound", "details": caught.value.message}


async def test_error_codes_of_the_contract(short_dir: Path) -> None:
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        cases: list[tuple[str, Any, int]] = [
            ("agent/open", {"profile": "nope"}, -32011),
            ("agent/open", {"profile": "echo", "config": {"command": "sh"}}, -32012),
            ("agent/open", {"profile": "echo", "config": {"cwd": "/"}}, -32012),
            ("agent/open", {"profile": "echo", "config": {"provider": "openai"}}, -32012),
            ("agent/open", {"profile": "echo", "config": {"colour": "red"}}, -32602),
            ("agent/open", {"profile": "echo", "surprise": 1}, -32602),
            ("agent/run", {"agentId": "agt_missing", "input": "x"}, -32011),
            ("run/cancel", {"runId": 5}, -32602),
            ("no/such", {}, -32601),
        ]
        for method, params, code in cases:
            with pytest.raises(DaemonError) as caught:
                await client.request(method, params)
            assert caught.value.rpc_code == code, (method, params, caught.value)
        forbidden = await _error(client, "agent/open", {"profile": "echo", "config": {"env": {}}})
        assert forbidden.data == {"name": "Forbidden", "details": forbidden.message}
        agent = await client.open("echo")
        for bad in (5, {"text": "x"}, None):
            error = await _error(client, "agent/run", {"agentId": agent.agent_id, "input": bad})
            assert error.rpc_code == -32602
        with pytest.raises(
            InvalidMessageError, match=r"^messages\[0\] must be an object, got number$"
        ):
            await agent.run([1])
        with pytest.raises(
            InvalidMessageError, match=r"messages\[0\]\.content must be a ContentBlock"
        ):
            await client.open("echo", history=[{"role": "user", "content": None}])
        assert await client.cancel("never-existed") is False


async def _error(client: Any, method: str, params: Any) -> DaemonError:
    with pytest.raises(DaemonError) as caught:
        await client.request(method, params)
    return caught.value


@pytest.mark.parametrize("method", ["run", "prompt", "stream"])
async def test_structured_input_to_process_agent_is_refused(short_dir: Path, method: str) -> None:
    marker = short_dir / "spawned"
    agents = f"""
[agents.marker]
kind = "process"
command = "touch"
args = ["{marker}"]
input = "none"
"""
    async with daemon(short_dir, agents=agents), connect(discovery_dir=short_dir) as client:
        agent = await client.open("marker")
        value: Any = [{"type": "text", "text": "x"}] if method == "prompt" else STRUCTURED
        with pytest.raises(InvalidMessageError) as caught:
            if method == "stream":
                [e async for e in agent.stream(value)]
            else:
                await getattr(agent, method)(value)
        assert str(caught.value) == (
            "The process external backend accepts string prompts only; structured messages or "
            "content blocks cannot be forwarded without loss."
        )
        assert await agent.history() == []
        assert not marker.exists()
        result = await agent.run("now spawn")
        assert result.success and marker.exists()


async def test_process_agent_through_the_daemon(short_dir: Path) -> None:
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        agent = await client.open("wordcount", systemPrompt="count these")
        result = await agent.run("three little words")
        assert result.output.strip() == "5"


async def test_hooks_over_the_wire(short_dir: Path) -> None:
    seen: list[Any] = []

    def before(context: dict[str, Any]) -> dict[str, Any]:
        seen.append(context)
        return {"prompt": context["prompt"].upper()}

    def after(result: AgentRunResult) -> AgentRunResult:
        result.output += "!"
        return result

    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        agent = await client.open("echo", before_run=before, after_run=after)
        result = await agent.prompt("quiet words")
        assert result.output == "QUIET WORDS!"
        assert seen[0]["prompt"] == "quiet words"
        assert seen[0]["agent"] == {"name": "echo", "kind": "llm", "ready": True, "model": "echo-1"}
        assert (await agent.history())[0]["content"][0]["text"] == "quiet words"


async def test_failing_hook_fails_the_run_with_callback_kind(short_dir: Path) -> None:
    def before(context: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("client-side hook bug")

    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        agent = await client.open("echo", before_run=before)
        result = await agent.run("x")
        assert result.success is False and result.status.code == "error"
        assert result.error_info is not None and result.error_info.kind == "callback"
        events = [e async for e in agent.stream("y")]
        assert [e.type for e in events] == ["error"]


async def test_hook_owner_gone_fails_runs_until_attach(short_dir: Path) -> None:
    async with daemon(short_dir):
        async with connect(discovery_dir=short_dir) as first:
            agent = await first.open("echo", before_run=lambda c: c)
            agent_id = agent.agent_id
        async with connect(discovery_dir=short_dir) as second:
            result = await second.request("agent/run", {"agentId": agent_id, "input": "x"})
            assert result["success"] is False
            assert result["errorInfo"]["kind"] == "callback"
            assert "disconnected" in result["errorInfo"]["message"]
            attached = await second.attach(agent_id, before_run=lambda c: {"prompt": "attached"})
            assert (await attached.run("x")).output == "attached"


async def test_hooks_must_be_declared(short_dir: Path) -> None:
    async with (
        daemon(short_dir),
        connect(discovery_dir=short_dir, declare_hooks=["afterRun"]) as client,
    ):
        error = await _error(
            client, "agent/open", {"profile": "echo", "config": {"hooks": {"beforeRun": True}}}
        )
        assert error.rpc_code == -32602
        assert "beforeRun" in str(error.data)
        agent = await client.open("echo", after_run=lambda result: result)
        assert (await agent.run("fine")).success
        wrong_type = await _error(
            client, "agent/open", {"profile": "echo", "config": {"hooks": {"afterRun": "yes"}}}
        )
        assert wrong_type.rpc_code == -32602


async def test_run_cancel_of_a_running_process(short_dir: Path) -> None:
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        agent = await client.open("sleeper")
        box: list[AgentRunResult] = []

        async def go() -> None:
            box.append(await agent.run("zzz", run_id="long"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(go)
            with anyio.fail_after(10):
                while not (await client.status())["processes"]:  # noqa: ASYNC110 - polling the daemon
                    await anyio.sleep(0.05)
            status = await client.status()
            assert status["runs"][0]["runId"] == "long"
            assert status["processes"][0]["agentId"] == agent.agent_id
            assert status["processes"][0]["runId"] == "long"
            assert await client.cancel("long") is True
        assert box[0].status.code == "cancelled"
        with anyio.fail_after(10):
            while (await client.status())["processes"]:  # noqa: ASYNC110
                await anyio.sleep(0.05)


async def test_runs_on_one_agent_are_served_in_order(short_dir: Path) -> None:
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        agent = await client.open("catter")
        done: list[str] = []

        async def go(index: int) -> None:
            result = await agent.run(f"run {index}")
            done.append(result.output)

        async with anyio.create_task_group() as tg:
            for index in range(5):
                tg.start_soon(go, index)
                await anyio.sleep(0.01)
        assert done == [f"run {index}" for index in range(5)]


async def test_queued_run_cancelled_before_start_spawns_nothing(short_dir: Path) -> None:
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        agent = await client.open("sleeper")
        results: dict[str, AgentRunResult] = {}

        async def go(run_id: str) -> None:
            results[run_id] = await agent.run("zzz", run_id=run_id)

        async with anyio.create_task_group() as tg:
            tg.start_soon(go, "first")
            with anyio.fail_after(10):
                while not (await client.status())["processes"]:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            tg.start_soon(go, "second")
            await anyio.sleep(0.2)
            status = await client.status()
            assert status["agents"][0]["queuedRuns"] == 1
            assert await client.cancel("second") is True
            assert await client.cancel("first") is True
        assert results["second"].status.code == "cancelled"
        assert results["first"].status.code == "cancelled"


async def test_overload_past_the_queue_limit(short_dir: Path) -> None:
    async with (
        daemon(short_dir, server="max_queued_runs = 1"),
        connect(discovery_dir=short_dir) as client,
    ):
        agent = await client.open("sleeper")

        async def go(run_id: str) -> None:
            await agent.run("zzz", run_id=run_id)

        async with anyio.create_task_group() as tg:
            tg.start_soon(go, "a")
            with anyio.fail_after(10):
                while not (await client.status())["runs"]:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            tg.start_soon(go, "b")
            await anyio.sleep(0.2)
            error = await _error(client, "agent/run", {"agentId": agent.agent_id, "input": "c"})
            assert error.rpc_code == -32001
            assert error.data == {"retryAfterMs": 1000, "details": error.message}
            await client.cancel("b")
            await client.cancel("a")


async def test_closing_connection_cancels_its_runs_and_kills_processes(short_dir: Path) -> None:
    async with daemon(short_dir), connect(discovery_dir=short_dir) as watcher:
        async with connect(discovery_dir=short_dir) as client:
            agent = await client.open("sleeper")
            async with anyio.create_task_group() as tg:
                tg.start_soon(agent.run, "zzz")
                with anyio.fail_after(10):
                    while not (await watcher.status())["processes"]:  # noqa: ASYNC110
                        await anyio.sleep(0.05)
                tg.cancel_scope.cancel()
        with anyio.fail_after(10):
            while True:
                status = await watcher.status()
                if not status["processes"] and not status["runs"]:
                    break
                await anyio.sleep(0.05)


async def test_run_agent_processes_carry_the_run_id(short_dir: Path) -> None:
    async with (
        daemon(short_dir),
        connect(discovery_dir=short_dir) as client,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(lambda: client.run_agent("sleeper", "zzz", run_id="one-off"))
        with anyio.fail_after(10):
            while not (processes := (await client.status())["processes"]):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        assert [(p["agentId"], p["runId"]) for p in processes] == [(None, "one-off")]
        assert await client.cancel("one-off") is True


CODER = f"""
[agents.coder]
kind = "acp"
command = "{sys.executable}"
args = ["{Path(__file__).resolve().parent.parent / "agents" / "acp_scenario_agent.py"}"]
terminal = true
"""


async def test_agent_close_ends_its_terminals_which_status_attributes(short_dir: Path) -> None:
    pids: dict[str, int] = {}
    async with daemon(short_dir, agents=AGENTS + CODER), connect(discovery_dir=short_dir) as client:
        agent = await client.open("coder")
        text = ""
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                nonlocal text
                with contextlib.suppress(DaemonError):
                    async for event in agent.stream("terminaltree hang --ignore-term --escape"):
                        if event.type == "text":
                            text += event.data

            tg.start_soon(run)
            try:
                with anyio.fail_after(20):
                    while len(pids := tree_pids(text)) < 2:  # noqa: ASYNC110
                        await anyio.sleep(0.05)
                processes = (await client.status())["processes"]
                by_pid = {p["pid"]: p["agentId"] for p in processes}
                # The agent, its terminal, and the terminal's escaped grandchild.
                assert len(processes) == 3, processes
                assert set(by_pid.values()) == {agent.agent_id}
                assert {pids["child"], pids["grandchild"]} <= set(by_pid)
                assert all("runId" not in p for p in processes)  # an ACP agent outlives runs
                agent_pid = next(pid for pid in by_pid if pid not in pids.values())
                await agent.close()
                with anyio.fail_after(5):
                    while not all(gone(pid) for pid in [agent_pid, *pids.values()]):  # noqa: ASYNC110
                        await anyio.sleep(0.05)
                assert (await client.status())["processes"] == []
            finally:
                kill_all(list(pids.values()))


async def test_run_agent_sends_progress(short_dir: Path) -> None:
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        progress: list[dict[str, Any]] = []
        result = await client.run_agent(
            "echo", STRUCTURED, on_progress=progress.append, name="alias"
        )
        assert result.output == "What is shown here? [image:image/png]"
        assert [p["type"] for p in progress] == ["agent_start", "agent_complete"]
        assert progress[0] == {
            "type": "agent_start",
            "agent": "alias",
            "data": {"messages": STRUCTURED},
        }
        assert progress[1]["data"]["output"] == result.output
        with pytest.raises(InvalidMessageError, match="accepts string prompts only"):
            await client.run_agent("wordcount", STRUCTURED, on_progress=progress.append)
        assert len(progress) == 2
