"""A storm of agent crashes: every run fails clearly; the daemon stays healthy, no zombie left."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import psutil
import pytest
from lifecycle.harness import config_text, daemon_process

from oma_bridge.client import connect
from oma_bridge.results import AgentRunResult

pytestmark = pytest.mark.anyio

CRASHES = 100
CRASH_AGENT = Path(__file__).with_name("crash_acp_agent.py")

AGENTS = f"""
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"

[agents.failing]
kind = "process"
command = "false"

[agents.crashy]
kind = "acp"
command = "{sys.executable}"
args = ["-I", "-S", "{CRASH_AGENT}"]
fs = "none"
permission = "reject"
"""


def assert_clear_failure(result: AgentRunResult, expected: str) -> None:
    assert not result.success
    assert result.status.code == "error", result.status
    assert result.error_info is not None and result.error_info.kind == "backend", result
    assert result.status.message is not None and expected in result.status.message, result.status


def zombies(pid: int) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


async def test_crash_storm_fails_every_run_and_leaves_the_daemon_healthy(folder: Path) -> None:
    text = config_text(folder, server="max_concurrent_runs = 64", agents=AGENTS)
    async with daemon_process(folder, text) as daemon, connect(discovery_dir=folder) as client:
        failing = await client.open("failing")
        crashy = await client.open("crashy")
        results: list[tuple[str, AgentRunResult]] = []

        async def process_crashes(worker: int) -> None:
            for k in range(worker, CRASHES, 10):
                results.append(("process", await failing.run(f"run {k}")))

        async def acp_crashes() -> None:
            # One ACP agent runs one turn at a time: each turn respawns it and it crashes.
            for k in range(CRASHES):
                results.append(("acp", await crashy.run(f"turn {k}")))

        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                for worker in range(10):
                    tg.start_soon(process_crashes, worker)
                tg.start_soon(acp_crashes)

        assert len(results) == 2 * CRASHES
        for kind, result in results:
            if kind == "process":
                assert_clear_failure(result, 'Process backend "failing" exited with code 1')
            else:
                assert_clear_failure(result, 'ACP agent "crashy" exited with code 3')
                assert "fatal: crashed mid-turn" in (result.status.message or "")

        # Healthy: status answers, nothing is left running or queued, an echo run works.
        status = await client.status()
        assert status["runs"] == []
        assert all(p["agentId"] != crashy.agent_id for p in status["processes"]), status
        echo = await client.open("echo")
        answer = await echo.run("still alive?")
        assert answer.success and "still alive?" in answer.output
        with anyio.fail_after(5):
            while zombies(daemon.pid):  # noqa: ASYNC110 (a poll of another process)
                await anyio.sleep(0.05)
        assert daemon.process.returncode is None
