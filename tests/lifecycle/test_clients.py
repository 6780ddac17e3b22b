"""Clients of a daemon subprocess: a reconnecting editor, and many clients at once."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from oma_bridge.client import connect

from .harness import config_text, daemon_process, describe, wait_all_gone

pytestmark = pytest.mark.anyio

DEMO = """
[agents.demo]
kind = "acp"
command = "@python"
args = ["-m", "oma_bridge.demo.acp_agent"]
"""

ECHO_AND_CAT = """
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"

[agents.cat]
kind = "process"
command = "cat"
"""


async def _acp_pid(client: Any, agent_id: str) -> int:
    status = await client.status()
    pids = [p["pid"] for p in status["processes"] if p["agentId"] == agent_id]
    assert len(pids) == 1, status
    return int(pids[0])


async def test_a_reconnecting_client_keeps_its_acp_session(folder: Path) -> None:
    async with daemon_process(folder, config_text(folder, agents=DEMO)) as daemon:
        async with connect(discovery_dir=folder) as first:
            agent = await first.open("demo")
            result = await agent.run("before the reconnect")
            assert "turn 1 of session demo-1" in result.output
            pid = await _acp_pid(first, agent.agent_id)
        # The connection is gone; the agent stays (PROTOCOL §3) with its process.
        async with connect(discovery_dir=folder) as second:
            assert await _acp_pid(second, agent.agent_id) == pid
            params = {"agentId": agent.agent_id, "input": "after the reconnect"}
            answer = await second.request("agent/run", params)
            assert answer["success"], answer
            assert "turn 2 of session demo-1" in answer["output"]
            assert await _acp_pid(second, agent.agent_id) == pid
        daemon.signal(signal.SIGTERM)
        with anyio.fail_after(10):
            assert await daemon.process.wait() == 0


CLIENTS = 50
RUNS = 5


async def test_fifty_clients_five_runs_each_at_once(folder: Path) -> None:
    text = config_text(folder, "max_queued_runs = 1024", ECHO_AND_CAT)
    async with daemon_process(folder, text) as daemon:
        outputs: dict[tuple[int, str, int], str] = {}
        # Every process the daemon had at some point during the load (pid -> process).
        seen: dict[int, psutil.Process] = {}

        async def client_session(number: int) -> None:
            async with connect(discovery_dir=folder) as client:
                echo = await client.open("echo")
                cat = await client.open("cat")

                async def one(agent: Any, kind: str, run: int) -> None:
                    result = await agent.run(f"client {number} run {run} via {kind}")
                    assert result.success, result.output
                    outputs[(number, kind, run)] = result.output

                async with anyio.create_task_group() as runs:
                    for run in range(RUNS):
                        runs.start_soon(one, echo, "echo", run)
                        runs.start_soon(one, cat, "cat", run)

        async def watch_tree() -> None:
            while True:
                for process in daemon.descendants():
                    seen.setdefault(process.pid, process)
                await anyio.sleep(0.05)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch_tree)
                async with anyio.create_task_group() as clients:
                    for number in range(CLIENTS):
                        clients.start_soon(client_session, number)
                tg.cancel_scope.cancel()
        assert len(outputs) == CLIENTS * RUNS * 2
        for (number, kind, run), output in outputs.items():
            assert output == f"client {number} run {run} via {kind}"
        async with connect(discovery_dir=folder) as client:
            status = await client.status()
            assert status["runs"] == [] and status["processes"] == []
        assert len(seen) > 1  # the supervisor's watchdog and at least one cat
        daemon.signal(signal.SIGTERM)
        with anyio.fail_after(10):
            assert await daemon.process.wait() == 0
        survivors = await wait_all_gone(list(seen.values()), within=2)
        assert survivors == [], describe(survivors)
