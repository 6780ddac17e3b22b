"""Descriptors do not grow with the agents open (PROTOCOL §23), on a daemon subprocess.

* 1,500 agents open at once under ``RLIMIT_NOFILE`` 1,024 (soft and hard,
  so the daemon cannot raise it): each has its session file, persistence
  stays on, the daemon's descriptors stay far below the limit, and after a
  restart the last agent resumes with what it ran.
* Under a soft limit below the hard one, ``oma-bridge serve`` raises the
  soft limit to the hard one at start.
"""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import psutil
import pytest
from lifecycle.harness import config_text, daemon_process

from oma_bridge.client import connect

pytestmark = pytest.mark.anyio

AGENTS = """
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"
"""
AGENT_COUNT = 1500
LIMIT = 1024


@pytest.mark.timeout(180)
async def test_1500_open_agents_under_1024_descriptors_keep_persistence_on(
    folder: Path,
) -> None:
    text = config_text(folder, "", AGENTS)
    async with daemon_process(folder, text, nofile=(LIMIT, LIMIT)) as daemon:
        process = psutil.Process(daemon.pid)
        assert process.rlimit(psutil.RLIMIT_NOFILE) == (LIMIT, LIMIT)
        async with connect(discovery_dir=folder) as client:
            limiter = anyio.Semaphore(32)
            ids: list[str] = []

            async def open_one() -> None:
                async with limiter:
                    ids.append((await client.open("echo")).agent_id)

            async with anyio.create_task_group() as tg:
                for _ in range(AGENT_COUNT):
                    tg.start_soon(open_one)
            last = (await client.open("echo")).agent_id
            result = await client.request(
                "agent/prompt", {"agentId": last, "input": "the last agent's turn"}
            )
            assert result["output"] == "the last agent's turn"
            status = await client.status()
            fds = process.num_fds()
        assert len(status["agents"]) == AGENT_COUNT + 1
        assert status["sessions"] == AGENT_COUNT + 1, status["sessions"]
        sessions = folder / "state" / "oma-bridge" / "sessions"
        with anyio.fail_after(30):  # the writer thread creates them as it gets to them
            while len(list(sessions.glob("*.jsonl"))) < AGENT_COUNT + 1:  # noqa: ASYNC110
                await anyio.sleep(0.1)
        assert "sessions stay in memory only" not in daemon.log()
        assert fds < LIMIT // 4, f"{fds} descriptors open with {AGENT_COUNT + 1} agents"
        daemon.signal(signal.SIGTERM)
        with anyio.fail_after(60):
            await daemon.process.wait()

    async with (
        daemon_process(folder, text, nofile=(LIMIT, LIMIT)),
        connect(discovery_dir=folder) as client,
    ):
        await client.request("agent/open", {"profile": "echo", "resume": last})
        history = await client.request("agent/history", {"agentId": last})
        texts = [str(message["content"]) for message in history["messages"]]
        assert any("the last agent's turn" in text for text in texts), texts


async def test_serve_raises_its_soft_descriptor_limit_to_the_hard_one(folder: Path) -> None:
    text = config_text(folder, "", AGENTS)
    async with daemon_process(folder, text, nofile=(LIMIT, 4 * LIMIT)) as daemon:
        assert psutil.Process(daemon.pid).rlimit(psutil.RLIMIT_NOFILE) == (4 * LIMIT, 4 * LIMIT)
