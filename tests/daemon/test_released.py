"""A closed agent is freed by reference counting alone (PROTOCOL §23), its connection open or not.

The cyclic collector is off for the test: an agent that is part of a
reference cycle (its own callbacks reaching back to it, a connection's close
callback pinning it) would outlive its close, and these weak references
would stay alive.
"""

from __future__ import annotations

import weakref
from pathlib import Path

import anyio
import pytest

from oma_bridge.client import connect

from .conftest import daemon, service_of

pytestmark = pytest.mark.anyio

AGENTS = """
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"
"""
WORDS = " ".join(f"w{i}" for i in range(200))


async def until_dead(refs: dict[str, weakref.ref[object]]) -> list[str]:
    """The names of the referents still alive after the loop had a moment to settle."""
    for _ in range(50):
        alive = [name for name, ref in refs.items() if ref() is not None]
        if not alive:
            return []
        await anyio.sleep(0.02)
    return alive


async def test_a_closed_agent_is_freed_without_the_collector(
    short_dir: Path, no_collector: None
) -> None:
    async with (
        daemon(short_dir, agents=AGENTS) as running,
        connect(discovery_dir=short_dir) as client,
    ):
        service = service_of(running)
        refs: dict[str, weakref.ref[object]] = {}
        for round_ in range(3):
            agent = await client.open("echo")
            hosted = service.host.agents[agent.agent_id]
            if round_ == 2:  # watched, attached and streamed: every callback it can have
                await client.request("agent/watch", {"agentId": agent.agent_id})
                await client.request("agent/attach", {"agentId": agent.agent_id})
            refs = {
                "agent": weakref.ref(hosted),
                "backend agent": weakref.ref(hosted.agent),
                "journal": weakref.ref(hosted.journal),
            }
            stream = agent.stream(WORDS)
            async for _event in stream:
                pass
            assert stream.result is not None and stream.result.output == WORDS
            del hosted
            await agent.close()
            alive = await until_dead(refs)
            assert alive == [], f"round {round_}: still alive after close: {alive}"
        # The connection is still open and still works.
        assert (await client.status())["agents"] == []
