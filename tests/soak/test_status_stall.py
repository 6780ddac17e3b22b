"""``daemon/status`` with 5,000 agents open does not stall the other clients (PROTOCOL §23).

On a daemon subprocess with 5,000 echo agents open, one client's round
trip (``agent/history`` of its own agent, a quick inline method) is
measured idle, then while another client polls ``daemon/status`` back to
back.  Each status answer lists every agent (the protocol's), so it costs
the loop its encoding; what must not come back is the work per agent it
used to do on the loop (~19 us each, the session files counted at each
call): 27-48 ms at the median for every other client's round trip at 5,000
agents.  The bound is relative to the idle round trip measured in the same
test, and generous: the machine's other load moves both.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import anyio
import pytest
from lifecycle.harness import config_text, daemon_process

from oma_bridge.client import Client, connect

pytestmark = pytest.mark.anyio

AGENTS = """
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"
"""
AGENT_COUNT = 5000
ROUND_TRIPS = 60


async def round_trips(client: Client, agent_id: str, count: int) -> list[float]:
    """``count`` round trips in ms, one at a time, a little apart."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        await client.request("agent/history", {"agentId": agent_id})
        times.append((time.perf_counter() - started) * 1000)
        await anyio.sleep(0.005)
    return times


@pytest.mark.timeout(180)
async def test_another_clients_round_trip_while_status_is_polled_at_5000_agents(
    folder: Path,
) -> None:
    text = config_text(folder, "max_connections = 16", AGENTS)
    async with (
        daemon_process(folder, text),
        connect(discovery_dir=folder) as opener,
        connect(discovery_dir=folder) as client,
        connect(discovery_dir=folder) as poller,
    ):
        limiter = anyio.Semaphore(64)

        async def open_one() -> None:
            async with limiter:
                await opener.open("echo")

        async with anyio.create_task_group() as tg:
            for _ in range(AGENT_COUNT - 1):
                tg.start_soon(open_one)
        mine = (await client.open("echo")).agent_id
        await round_trips(client, mine, 10)  # warm-up
        idle = await round_trips(client, mine, ROUND_TRIPS)

        polls: list[float] = []
        done = anyio.Event()

        async def poll() -> None:
            while not done.is_set():
                started = time.perf_counter()
                status = await poller.status()
                polls.append((time.perf_counter() - started) * 1000)
                assert len(status["agents"]) == AGENT_COUNT

        async with anyio.create_task_group() as tg:
            tg.start_soon(poll)
            await anyio.sleep(0.2)
            polled = await round_trips(client, mine, ROUND_TRIPS)
            done.set()

    idle_p50, polled_p50 = statistics.median(idle), statistics.median(polled)
    polled_max = max(polled)
    figures = (
        f"round trip with {AGENT_COUNT:,} agents open: idle p50 {idle_p50:.2f} ms "
        f"(max {max(idle):.1f}); while daemon/status is polled p50 {polled_p50:.2f} ms "
        f"(max {polled_max:.1f}); {len(polls)} status answers, "
        f"p50 {statistics.median(polls):.1f} ms"
    )
    print(figures)
    # Generous: a status answer of 5,000 rows still takes the loop a few ms to
    # encode and write, and two loaded cores move everything.
    assert polled_p50 <= max(5 * idle_p50, idle_p50 + 15), figures
