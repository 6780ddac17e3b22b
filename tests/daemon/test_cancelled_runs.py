"""A cancelled run's ``run_end`` is journaled and persisted whatever cancelled it (PROTOCOL §13.3).

Its client leaving (the default ``onDisconnect: "cancel"``), ``run/cancel``
(running, or still queued), ``agent/close`` and a daemon shutdown: each
leaves a ``run_end`` with ``status.code = "cancelled"`` that ``run/result``
answers afterwards, and (but after ``agent/close``, which deletes the
session's files) a restarted daemon answers it too.  Real daemon, real
socket, a real process agent that would otherwise sleep for a minute.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from support.wire import Wire, wire_client

from .conftest import daemon

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_daemon_errors")]

AGENTS = f"""
[agents.sleeper]
kind = "process"
command = "{sys.executable}"
args = ["-c", "import time; print('started', flush=True); time.sleep(60)"]
input = "none"
"""


async def started(wire: Wire, agent_id: str, run_id: str) -> None:
    """Until the run's process has said it started (its first event is journaled)."""
    await wire.result("agent/watch", {"agentId": agent_id, "afterSeq": 0})

    def printed(w: Wire) -> bool:
        return any(
            n["entry"]["type"] == "event" and n["entry"]["runId"] == run_id
            for n in w.events("agent/event")
        )

    await wire.wait_for(printed, within=20)


async def finished_result(wire: Wire, run_id: str) -> dict[str, Any]:
    """``run/result`` once the run has ended (-32014 while it is still going)."""
    with anyio.fail_after(20):
        while True:
            answer = await wire.call("run/result", {"runId": run_id})
            if "result" in answer:
                return dict(answer["result"])
            assert answer["error"]["code"] == -32014, answer  # running: never unknown
            await anyio.sleep(0.05)


def assert_cancelled(result: dict[str, Any], run_id: str) -> None:
    assert result["runId"] == run_id
    assert result["success"] is False
    assert result["status"]["code"] == "cancelled", result


async def journal_ends(wire: Wire, agent_id: str) -> list[dict[str, Any]]:
    """The ``run_end`` entries of the agent's journal, read from its start."""
    await wire.result("agent/unwatch", {"agentId": agent_id})
    before = len(wire.events("agent/event"))
    await wire.result("agent/watch", {"agentId": agent_id, "afterSeq": 0})
    replayed = [n["entry"] for n in wire.events("agent/event")[before:]]
    return [entry for entry in replayed if entry["type"] == "run_end"]


async def after_a_restart(folder: Path, agent_id: str, *run_ids: str) -> None:
    """A daemon started again on the same state folder answers the run's result."""
    async with daemon(folder, agents=AGENTS), wire_client(folder / "bridge.sock") as wire:
        for run_id in run_ids:
            assert_cancelled(await wire.result("run/result", {"runId": run_id}), run_id)
        await wire.result("agent/open", {"profile": "sleeper", "resume": agent_id})
        ends = await journal_ends(wire, agent_id)
        assert [end["runId"] for end in ends] == list(run_ids)


async def test_the_client_leaving_journals_the_run_end(short_dir: Path) -> None:
    socket_path = short_dir / "bridge.sock"
    async with daemon(short_dir, agents=AGENTS), wire_client(socket_path) as observer:
        async with wire_client(socket_path, name="leaver") as leaver:
            agent_id = (await leaver.result("agent/open", {"profile": "sleeper"}))["agentId"]
            params = {"agentId": agent_id, "input": "go", "runId": "r-left"}
            await leaver.send({"id": "run", "method": "agent/stream", "params": params})
            await started(observer, agent_id, "r-left")
            leaver.abort()  # onDisconnect defaults to "cancel"
        assert_cancelled(await finished_result(observer, "r-left"), "r-left")
        [end] = await journal_ends(observer, agent_id)
        assert_cancelled(end["result"], "r-left")
    await after_a_restart(short_dir, agent_id, "r-left")


async def test_run_cancel_journals_the_run_end_running_or_queued(short_dir: Path) -> None:
    socket_path = short_dir / "bridge.sock"
    async with daemon(short_dir, agents=AGENTS), wire_client(socket_path) as wire:
        agent_id = (await wire.result("agent/open", {"profile": "sleeper"}))["agentId"]
        for run_id in ("r-running", "r-queued"):  # the second waits behind the first
            params = {"agentId": agent_id, "input": "go", "runId": run_id}
            await wire.send({"id": run_id, "method": "agent/run", "params": params})
        await started(wire, agent_id, "r-running")
        for run_id in ("r-queued", "r-running"):
            assert await wire.result("run/cancel", {"runId": run_id}) == {"cancelled": True}
        for run_id in ("r-queued", "r-running"):
            assert_cancelled(await finished_result(wire, run_id), run_id)
        ends = await journal_ends(wire, agent_id)
        assert [end["runId"] for end in ends] == ["r-queued", "r-running"]
    await after_a_restart(short_dir, agent_id, "r-queued", "r-running")


async def test_agent_close_journals_the_run_end(short_dir: Path) -> None:
    socket_path = short_dir / "bridge.sock"
    answers: list[dict[str, Any]] = []
    async with (
        daemon(short_dir, agents=AGENTS),
        wire_client(socket_path) as runner,
        wire_client(socket_path, name="closer") as closer,
        anyio.create_task_group() as tg,
    ):
        agent_id = (await runner.result("agent/open", {"profile": "sleeper"}))["agentId"]
        params = {"agentId": agent_id, "input": "go", "runId": "r-closed"}

        async def run() -> None:
            answers.append(await runner.call("agent/run", params, within=30))

        tg.start_soon(run)
        await started(closer, agent_id, "r-closed")
        assert await closer.result("agent/close", {"agentId": agent_id}) == {}
        # The journal went with the agent; the result did not.
        assert_cancelled(await finished_result(closer, "r-closed"), "r-closed")
    [answer] = answers  # the run's own caller got the same result
    assert_cancelled(answer["result"], "r-closed")
    # agent/close deletes the session's files (§13.4): nothing to resume.
    assert not list((short_dir / "state" / "sessions").glob(f"{agent_id}*"))


async def test_a_daemon_shutdown_journals_and_persists_the_run_end(short_dir: Path) -> None:
    socket_path = short_dir / "bridge.sock"
    async with daemon(short_dir, agents=AGENTS) as running, wire_client(socket_path) as wire:
        agent_id = (await wire.result("agent/open", {"profile": "sleeper"}))["agentId"]
        params = {"agentId": agent_id, "input": "go", "runId": "r-stopped"}
        await wire.send({"id": "run", "method": "agent/run", "params": params})
        await started(wire, agent_id, "r-stopped")
        running.stop()
        await wire.wait_for(lambda w: w.closed, within=20)
    # Cancelled by the stop, not "daemon stopped during the run" (a crash's record).
    await after_a_restart(short_dir, agent_id, "r-stopped")
