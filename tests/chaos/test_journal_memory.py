"""The journal stays within its limits under a 100 MB stream: the daemon's RSS stays flat.

A process agent prints 4 MiB per run in 64 KiB writes, 25 runs in a row on
one agent (100 MiB through the journal, every chunk an entry); with the
default ``journal_max_bytes`` (16 MiB) the daemon's RSS, measured with
psutil before and after, grows by less than 64 MiB, and the oldest entries
are gone (``agent/watch afterSeq 0`` is ``CursorExpired``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import psutil
import pytest
from lifecycle.harness import AGENTS_DIR, config_text, daemon_process

from oma_bridge.client import DaemonError, connect

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024
PER_RUN = 4 * MIB
RUNS = 25

AGENTS = f"""
[agents.chunky]
kind = "process"
command = "{sys.executable}"
args = ["{AGENTS_DIR / "proc_emit.py"}", "flood", "{PER_RUN}"]
input = "none"
"""


async def test_a_100_mb_stream_keeps_the_daemon_within_the_journal_limits(folder: Path) -> None:
    text = config_text(folder, "", AGENTS)
    with anyio.fail_after(120):
        async with daemon_process(folder, text) as daemon, connect(discovery_dir=folder) as client:
            process = psutil.Process(daemon.pid)
            agent = await client.open("chunky")
            for _ in range(2):  # warm-up: imports, first allocations, the journal filling up
                assert (await agent.run("x")).output == "x" * PER_RUN
            baseline = process.memory_info().rss
            peak = baseline
            for _ in range(RUNS):
                result = await agent.run("x")
                assert result.success and len(result.output) == PER_RUN
                peak = max(peak, process.memory_info().rss)
            grown = process.memory_info().rss - baseline
            with pytest.raises(DaemonError) as caught:
                await client.request("agent/watch", {"agentId": agent.agent_id, "afterSeq": 0})
            assert caught.value.rpc_code == -32013
            oldest = caught.value.data["oldestSeq"]
            # 27 runs of 66 entries each (run_start, 64 chunks, run_end) were written.
            assert oldest > 27 * 66 - 16 * MIB // (64 * 1024)
            status = await client.status()
    print(f"RSS: baseline {baseline / MIB:.0f} MiB, after +{grown / MIB:.1f} MiB,", end=" ")
    print(f"peak +{(peak - baseline) / MIB:.1f} MiB")
    assert grown < 64 * MIB, f"the daemon grew by {grown / MIB:.0f} MiB"
    assert status["sessions"] == 1
