"""``Client`` against a live daemon: a journal read whole, a finished run's result."""

from __future__ import annotations

from pathlib import Path

import pytest
from daemon.conftest import daemon, short_dir

from oma_bridge.client import DaemonError, connect

__all__ = ["short_dir"]

pytestmark = pytest.mark.anyio


async def test_journal_reads_what_is_held_and_stops_watching(short_dir: Path) -> None:
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        agent = await client.open("echo")
        assert await client.journal(agent.agent_id) == []  # nothing yet, and no error
        await agent.run("one", run_id="r-1")
        await agent.run("two", run_id="r-2")
        held = await client.journal(agent.agent_id)
        assert [e.seq for e in held] == list(range(1, len(held) + 1))
        assert [e.entry.get("runId") for e in held if e.type == "run_end"] == ["r-1", "r-2"]
        first_end = next(e.seq for e in held if e.type == "run_end")
        later = await client.journal(agent.agent_id, after_seq=first_end)
        assert later == held[first_end:]


async def test_journal_of_a_trimmed_agent_starts_at_its_oldest_entry(short_dir: Path) -> None:
    async with (
        daemon(short_dir, server="journal_max_events = 4"),
        connect(discovery_dir=short_dir) as client,
    ):
        agent = await client.open("echo")
        for n in range(4):
            await agent.run(f"run {n}", run_id=f"r-{n}")
        held = await client.journal(agent.agent_id)
        assert len(held) == 4 and held[0].seq > 1
        assert held[-1].entry.get("runId") == "r-3"
        with pytest.raises(DaemonError) as expired:
            await client.journal(agent.agent_id, after_seq=0)  # asked for: not silently moved
        assert expired.value.data["name"] == "CursorExpired"


async def test_result_of_a_finished_run_and_of_none(short_dir: Path) -> None:
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        agent = await client.open("wordcount")
        ran = await agent.run("a b c", run_id="r-wc")
        again = await client.result("r-wc")
        assert again.to_wire() == ran.to_wire()
        with pytest.raises(DaemonError) as unknown:
            await client.result("r-none")
        assert unknown.value.rpc_code == -32011
