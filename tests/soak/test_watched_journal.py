"""A watched or replayed journal keeps no more than an unwatched one (PROTOCOL §23).

The journal's byte limit counts what it keeps, and what the daemon kept
for its watchers (each entry's encoded ``agent/event``) used to be kept
beside it, uncounted: ~7.6x the memory ``docs/sessions.md`` promises for a
watched journal.  On a daemon subprocess, three agents each stream the
same 5,000 entries (the journal's ``journal_max_events``): one nobody
watches and one a second connection watches live; then the first is
replayed from its first entry to a third connection.  The watched agent's
RSS growth stays within a few MiB of the unwatched one's, and the replay
adds no more than noise.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import psutil
import pytest
from lifecycle.harness import config_text, daemon_process

from oma_bridge.client import Client, RemoteAgent, connect

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024
ENTRIES = 5000
#: The echo provider streams one entry per word (``join_text`` is off), and the
#: run adds three: its start, the stream's ``done`` event and its end.
WORDS = " ".join(f"w{i}" for i in range(ENTRIES - 3))
#: Watched, each entry's frame used to stay: ~4.5 KiB of RSS each, ~22 MiB here.
NOISE_MIB = 5.0

AGENTS = """
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"
"""
SERVER = f"journal_max_events = {ENTRIES}\njoin_text = false"


def rss_mib(process: psutil.Process) -> float:
    return process.memory_info().rss / MIB


async def stream(agent: RemoteAgent) -> None:
    handle = agent.stream(WORDS)
    async for _event in handle:
        pass
    assert handle.result is not None and handle.result.output == WORDS


async def watch_until(folder: Path, agent_id: str, seq: int, after_seq: int | None) -> int:
    """On a connection of its own, watch ``agent_id`` until entry ``seq`` came; the count."""
    seqs: list[int] = []
    async with (
        connect(discovery_dir=folder) as watcher,
        watcher.watch(agent_id, after_seq=after_seq) as entries,
    ):
        async for entry in entries:
            seqs.append(entry.seq)
            if entry.seq >= seq:
                return len(seqs)
    raise AssertionError("the watch ended early")


async def last_seq(client: Client, agent_id: str) -> int:
    status = await client.request("agent/watch", {"agentId": agent_id})
    await client.request("agent/unwatch", {"agentId": agent_id})
    return int(status["seq"])


@pytest.mark.timeout(120)
async def test_a_watched_journal_grows_the_daemon_as_an_unwatched_one_does(folder: Path) -> None:
    text = config_text(folder, SERVER, AGENTS)
    async with daemon_process(folder, text) as daemon, connect(discovery_dir=folder) as client:
        process = psutil.Process(daemon.pid)
        warm = await client.open("echo")  # imports, first allocations, a full journal once
        await stream(warm)
        await warm.close()

        before = rss_mib(process)
        unwatched = await client.open("echo")
        await stream(unwatched)
        unwatched_growth = rss_mib(process) - before

        before = rss_mib(process)
        watched = await client.open("echo")
        async with anyio.create_task_group() as tg:
            seen: list[int] = []

            async def follow() -> None:
                seen.append(await watch_until(folder, watched.agent_id, ENTRIES, None))

            tg.start_soon(follow)
            await anyio.sleep(0.5)  # the watch is registered before the run starts
            await stream(watched)
        assert seen == [ENTRIES]
        watched_growth = rss_mib(process) - before

        before = rss_mib(process)  # the first replay of the journal nobody watched
        end = await last_seq(client, unwatched.agent_id)
        assert end == ENTRIES
        assert await watch_until(folder, unwatched.agent_id, end, 0) == ENTRIES
        replay_growth = rss_mib(process) - before

    figures = (
        f"RSS growth for {ENTRIES:,} entries: unwatched {unwatched_growth:.1f} MiB, "
        f"watched {watched_growth:.1f} MiB, then a replay of all {replay_growth:+.1f} MiB"
    )
    print(figures)
    assert watched_growth < unwatched_growth + NOISE_MIB, figures
    assert replay_growth < NOISE_MIB, figures
