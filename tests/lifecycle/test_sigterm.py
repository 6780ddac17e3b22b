"""SIGTERM ends a busy daemon cleanly: status 0, in time, no file and no process left."""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from oma_bridge.client import Client, connect

from .harness import SCENARIO_AGENT, config_text, daemon_process, describe, wait_all_gone

pytestmark = pytest.mark.anyio

STOP_GRACE_S = 1.0

AGENTS = f"""
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"

[agents.sleeper]
kind = "process"
command = "@python"
args = ["-c", "import time; print('started', flush=True); time.sleep(60)"]

[agents.slow]
kind = "acp"
command = "@python"
args = ["{SCENARIO_AGENT}"]
env = {{ PYTHONUNBUFFERED = "1" }}
cancel_grace_s = 1.0
"""


async def _first_text(
    tg: anyio.abc.TaskGroup, client: Client, profile: str, text: str, outcomes: list[Any]
) -> None:
    """Stream a run until its first text event, then keep it running in the background."""
    agent = await client.open(profile)
    started = anyio.Event()

    async def consume() -> None:
        try:
            async for event in agent.stream(text):
                if event.type == "text":
                    started.set()
            outcomes.append("finished")
        except Exception as error:  # the daemon went away under the run: expected
            outcomes.append(type(error).__name__)
        started.set()

    tg.start_soon(consume)
    with anyio.fail_after(20):
        await started.wait()


async def test_sigterm_with_live_runs_of_every_kind(folder: Path) -> None:
    text = config_text(folder, f"stop_grace_s = {STOP_GRACE_S}", AGENTS)
    async with daemon_process(folder, text) as daemon:
        outcomes: list[Any] = []
        hook_called = anyio.Event()

        async def hang(context: Any) -> Any:
            hook_called.set()
            await anyio.sleep_forever()

        async with connect(discovery_dir=folder) as client, anyio.create_task_group() as tg:
            # An LLM run held in its beforeRun hook, a process run, an ACP turn.
            echo = await client.open("echo", before_run=hang)

            async def echo_run() -> None:
                try:
                    await echo.run("held")
                    outcomes.append("finished")
                except Exception as error:
                    outcomes.append(type(error).__name__)

            tg.start_soon(echo_run)
            with anyio.fail_after(20):
                await hook_called.wait()
            await _first_text(tg, client, "sleeper", "x", outcomes)
            await _first_text(tg, client, "slow", "slow", outcomes)
            status = await client.status()
            assert len(status["runs"]) == 3
            agent_ids = {agent["agentId"] for agent in status["agents"]}
            assert {p["agentId"] for p in status["processes"]} <= agent_ids
            assert len(status["processes"]) >= 2  # the sleeper and the ACP agent
            tree = daemon.descendants()
            assert {p.pid for p in tree} >= {p["pid"] for p in status["processes"]}

            signalled = time.monotonic()
            daemon.signal(signal.SIGTERM)
            with anyio.fail_after(STOP_GRACE_S + 2):
                code = await daemon.process.wait()
            elapsed = time.monotonic() - signalled
        assert code == 0, daemon.log()
        assert elapsed <= STOP_GRACE_S + 2
        print(f"stopped {elapsed:.2f}s after SIGTERM")
        assert len(outcomes) == 3  # every run ended for its client, one way or another
        assert not daemon.discovery.exists()
        assert not (folder / "bridge.sock").exists()
        survivors = await wait_all_gone(tree, within=2)
        assert survivors == [], describe(survivors)
        assert "received SIGTERM; stopping" in daemon.log()


GRACEFUL_CHILD = Path(__file__).with_name("graceful_child.py")


@pytest.mark.parametrize("method", ["agent/run", "agent/stream"])
async def test_sigterm_gives_a_running_process_its_grace(folder: Path, method: str) -> None:
    marker = folder / "marker"
    agents = f"""
[agents.graceful]
kind = "process"
command = "@python"
args = ["{GRACEFUL_CHILD}", "{marker}"]
"""
    text = config_text(folder, "stop_grace_s = 2.0", agents)
    async with daemon_process(folder, text) as daemon:
        async with connect(discovery_dir=folder) as client, anyio.create_task_group() as tg:
            agent = await client.open("graceful")
            params = {"agentId": agent.agent_id, "input": "x", "runId": "r1"}

            async def run() -> None:
                with contextlib.suppress(Exception):  # the daemon goes away under it
                    await client.request(method, params)

            tg.start_soon(run)
            with anyio.fail_after(10):
                while not marker.exists():  # noqa: ASYNC110 (a poll of the child's file)
                    await anyio.sleep(0.02)
            daemon.signal(signal.SIGTERM)
            with anyio.fail_after(2.0 + 2):
                assert await daemon.process.wait() == 0
        assert marker.read_text() == "cleaned up"
