"""Idle agents are closed after agent_idle_ttl_s (PROTOCOL §3, §11.22)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from oma_bridge.client import Client, DaemonError, connect

from .conftest import daemon

pytestmark = pytest.mark.anyio


async def open_agents(client: Client) -> set[str]:
    return {agent["agentId"] for agent in (await client.status())["agents"]}


async def test_an_agent_is_closed_once_idle_for_the_ttl(short_dir: Path) -> None:
    async with (
        daemon(short_dir, server="agent_idle_ttl_s = 0.3"),
        connect(discovery_dir=short_dir) as first,
    ):
        kept = await first.open("echo")
        await kept.run("still used")
        async with connect(discovery_dir=short_dir) as second:
            dropped = await second.open("echo")
        # The opener of `dropped` is gone; `kept`'s opener is still connected.
        with anyio.fail_after(10):
            while dropped.agent_id in await open_agents(first):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        await anyio.sleep(0.6)  # well past the TTL
        assert kept.agent_id in await open_agents(first)
        assert (await kept.run("alive")).success
        with pytest.raises(DaemonError) as caught:
            await first.request("agent/run", {"agentId": dropped.agent_id, "input": "x"})
        assert caught.value.rpc_code == -32011


async def test_a_reconnecting_client_within_the_ttl_keeps_its_agent(short_dir: Path) -> None:
    async with daemon(short_dir, server="agent_idle_ttl_s = 2"):
        async with connect(discovery_dir=short_dir) as first:
            agent = await first.open("echo")
            await agent.prompt("remember")
        async with connect(discovery_dir=short_dir) as again:
            await again.attach(agent.agent_id)
            history = await again.request("agent/history", {"agentId": agent.agent_id})
            assert history["messages"][0]["content"][0]["text"] == "remember"
            await anyio.sleep(2.5)  # attached: a user again, so not idle
            assert agent.agent_id in await open_agents(again)


async def test_a_busy_agent_is_not_idle_and_its_ttl_starts_when_the_run_ends(
    short_dir: Path,
) -> None:
    async with (
        daemon(short_dir, server="agent_idle_ttl_s = 0.3"),
        connect(discovery_dir=short_dir) as runner,
    ):
        async with connect(discovery_dir=short_dir) as owner:
            # With a hook, only the owner's connection keeps the agent in use.
            agent = await owner.open("sleeper", after_run=lambda result: result)
        params = {"agentId": agent.agent_id, "input": "zzz", "runId": "busy"}
        async with anyio.create_task_group() as tg:
            tg.start_soon(runner.request, "agent/run", params)
            with anyio.fail_after(10):
                while not (await runner.status())["processes"]:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            await anyio.sleep(0.8)  # past the TTL, the owner gone, the run going
            assert agent.agent_id in await open_agents(runner)
            assert await runner.cancel("busy")
        with anyio.fail_after(10):
            while agent.agent_id in await open_agents(runner):  # noqa: ASYNC110
                await anyio.sleep(0.05)
