"""``agent/fork`` over the wire with the Python client (PROTOCOL §22.4; server/agents/fork.py).

A fork starts with a copy of its parent's history and journal; from then on
the two go their own ways, and a fork survives a daemon restart like any
session.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from oma_bridge.client import DaemonError, RemoteAgent, connect

from .conftest import daemon, short_dir

__all__ = ["short_dir"]

pytestmark = pytest.mark.anyio


def said(history: list[dict[str, Any]]) -> list[str]:
    """Each message's text, in order (user turns and the echo's answers)."""
    return [
        block["text"] if isinstance(block, dict) else str(block)
        for message in history
        for block in (
            message["content"] if isinstance(message["content"], list) else [message["content"]]
        )
    ]


async def test_an_llm_fork_starts_as_its_parent_and_goes_its_own_way(short_dir: Path) -> None:
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        parent = await client.open("echo")
        await parent.prompt("one")
        fork = await parent.fork()
        assert isinstance(fork, RemoteAgent) and fork.agent_id != parent.agent_id
        assert await fork.get_history() == await parent.get_history()
        before = await client.journal(parent.agent_id)
        await fork.prompt("fork two")
        await parent.prompt("parent two")
        assert said(await parent.get_history()) == ["one", "one", "parent two", "parent two"]
        assert said(await fork.get_history()) == ["one", "one", "fork two", "fork two"]
        # The fork's journal begins with the parent's entries (seq and all), then its own.
        parent_journal = await client.journal(parent.agent_id)
        fork_journal = await client.journal(fork.agent_id)
        copied = [(e.seq, e.entry) for e in before]
        assert [(e.seq, e.entry) for e in fork_journal[: len(before)]] == copied
        assert [(e.seq, e.entry) for e in parent_journal[: len(before)]] == copied
        fork_inputs = [e.entry.get("input") for e in fork_journal if e.type == "run_start"]
        parent_inputs = [e.entry.get("input") for e in parent_journal if e.type == "run_start"]
        assert fork_inputs == ["one", "fork two"] and parent_inputs == ["one", "parent two"]
        # A fork of a fork, and a process agent (stateless) forks too.
        second = await fork.fork()
        assert said(await second.get_history()) == said(await fork.get_history())
        counter = await client.open("wordcount")
        assert (await counter.prompt("a b c")).output.strip() == "3"
        counted = await counter.fork()
        assert (await counted.prompt("a b")).output.strip() == "2"


async def test_a_fork_survives_a_restart(short_dir: Path) -> None:
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        parent = await client.open("echo")
        await parent.prompt("one")
        fork = await parent.fork()
        await fork.prompt("fork two")
        ids = parent.agent_id, fork.agent_id
        histories = [await parent.get_history(), await fork.get_history()]
        journals = [await client.journal(agent_id) for agent_id in ids]
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        for agent_id, history, journal in zip(ids, histories, journals, strict=True):
            opened = await client.request("agent/open", {"profile": "echo", "resume": agent_id})
            assert opened == {"agentId": agent_id}
            back = RemoteAgent(client, agent_id, "echo", None, None)
            assert await back.get_history() == history
            assert [(e.seq, e.entry) for e in await client.journal(agent_id)] == [
                (e.seq, e.entry) for e in journal
            ]
        again = RemoteAgent(client, ids[1], "echo", None, None)
        await again.prompt("after")
        assert said(await again.get_history())[-2:] == ["after", "after"]


async def test_a_fork_is_refused_while_a_run_is_in_flight_and_for_no_agent(
    short_dir: Path,
) -> None:
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        sleeper = await client.open("sleeper")
        stream = sleeper.stream("go")
        async for event in stream:
            assert event.type == "text"  # "started": the run is in flight
            break
        with pytest.raises(DaemonError) as caught:
            await sleeper.fork()
        assert caught.value.rpc_code == -32014
        assert "fork it once the run ended" in str(caught.value)
        await stream.aclose()
        with pytest.raises(DaemonError) as missing:
            await client.request("agent/fork", {"agentId": "agt_nope"})
        assert missing.value.rpc_code == -32011
