"""A daemon that runs for weeks gives memory back (PROTOCOL §23), measured on a daemon subprocess.

* Two cycles of opening and closing 2,000 agents on one connection that
  stays open: the second cycle leaves RSS where the first did (a closed
  agent is released by every connection that used it, not when that
  connection ends).
* 60 clients in sequence, each connecting, opening an agent, streaming
  2,000 entries, closing it and disconnecting: RSS after the last is where
  it was after the tenth (nothing a client leaves waits for the cyclic
  collector, whose thresholds ``oma-bridge serve`` raises, D23).

The figures go into the assertion messages; each test takes seconds.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import psutil
import pytest
from lifecycle.harness import config_text, daemon_process

from oma_bridge.client import Client, connect

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024
#: What the allocator and the interpreter's caches move by between two
#: identical rounds; a pinned agent costs ~8 KiB, so 2,000 of them ~16 MiB.
NOISE_MIB = 5.0

AGENTS = """
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"
"""
#: The echo provider streams one entry per word.
WORDS = " ".join(f"w{i}" for i in range(2000))


def rss_mib(process: psutil.Process) -> float:
    return process.memory_info().rss / MIB


async def open_and_close(client: Client, count: int) -> None:
    """Open ``count`` agents and close each, 32 at a time, on one connection."""
    limiter = anyio.Semaphore(32)

    async def one() -> None:
        async with limiter:
            agent = await client.open("echo")
            await agent.close()

    async with anyio.create_task_group() as tg:
        for _ in range(count):
            tg.start_soon(one)


@pytest.mark.timeout(120)
async def test_closed_agents_are_released_while_their_connection_stays_open(
    folder: Path,
) -> None:
    text = config_text(folder, "", AGENTS)
    async with daemon_process(folder, text) as daemon, connect(discovery_dir=folder) as client:
        process = psutil.Process(daemon.pid)
        await open_and_close(client, 200)  # warm-up: imports, first allocations
        start = rss_mib(process)
        await open_and_close(client, 2000)
        first = rss_mib(process)
        await open_and_close(client, 2000)
        second = rss_mib(process)
        assert (await client.status())["agents"] == []
    figures = f"RSS {start:.1f} MiB, {first:.1f} after 2,000, {second:.1f} after 4,000"
    assert second - first < NOISE_MIB, figures


@pytest.mark.timeout(120)
async def test_clients_that_come_and_go_leave_no_memory_behind(folder: Path) -> None:
    text = config_text(folder, "", AGENTS)
    samples: list[float] = []
    async with daemon_process(folder, text) as daemon:
        process = psutil.Process(daemon.pid)
        started = time.monotonic()
        for _ in range(60):
            async with connect(discovery_dir=folder) as client:
                agent = await client.open("echo")
                stream = agent.stream(WORDS)
                async for _event in stream:
                    pass
                assert stream.result is not None and stream.result.output == WORDS
                await agent.close()
            samples.append(rss_mib(process))
        elapsed = time.monotonic() - started
    tenth, last = samples[9], samples[-1]
    figures = (
        f"RSS after client 10: {tenth:.1f} MiB, after 60: {last:.1f} MiB "
        f"(every 10th: {[round(s, 1) for s in samples[9::10]]}; {elapsed:.1f}s)"
    )
    assert last - tenth < NOISE_MIB, figures
