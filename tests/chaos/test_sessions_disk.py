"""A disk that fills up under the sessions: in memory from then on, one warning, no failed run."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import anyio
import pytest
from lifecycle.harness import config_text, daemon_process

from oma_bridge.client import connect

from .test_full_disk import tmpfs

__all__ = ["tmpfs"]  # the 1 MiB tmpfs fixture of the full-disk tests

pytestmark = pytest.mark.anyio

AGENTS = """
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"
"""

WARNING = "sessions stay in memory only"


def fill_up(folder: Path) -> None:
    """Take every free byte of ``folder``'s file system (unbuffered: nothing left to flush)."""
    with (folder / "filler").open("wb", buffering=0) as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 4096)


async def test_a_full_disk_turns_persistence_off_once_and_no_run_fails(
    folder: Path, tmpfs: Path
) -> None:
    text = config_text(folder, agents=AGENTS)
    words = " ".join(f"word{k}" for k in range(2_000))  # ~20 KB of entries and history a run
    with anyio.fail_after(60):
        async with daemon_process(folder, text, env={"XDG_STATE_HOME": str(tmpfs)}) as daemon:
            async with connect(discovery_dir=folder) as client:
                agent = await client.open("echo")
                assert (await agent.prompt("before the disk filled")).success
                fill_up(tmpfs)
                for k in range(30):
                    result = await agent.prompt(f"{k} {words}")
                    assert result.success and result.output == f"{k} {words}", result.status
                await daemon.wait_log(WARNING)
                # Everything is still there, in memory: history and journal.
                assert len(await agent.history()) == 2 * 31
                watch = await client.request("agent/watch", {"agentId": agent.agent_id})
                assert watch["seq"] == (4 + 2) + 30 * (
                    2_001 + 2
                )  # run_start, a text a word, run_end
            daemon.signal(signal.SIGTERM)
            assert await daemon.process.wait() == 0
        log = daemon.log()
        assert log.count(WARNING) == 1, log
        assert "Traceback" not in log
