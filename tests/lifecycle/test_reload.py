"""SIGHUP reloads the profiles of a daemon subprocess; a broken config changes nothing."""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import pytest

from oma_bridge.client import Client, DaemonError, connect

from .harness import config_text, daemon_process

pytestmark = pytest.mark.anyio


def _echo(name: str, system_prompt: str) -> str:
    return f"""
[agents.{name}]
kind = "llm"
provider = "echo"
model = "echo-1"
system_prompt = "{system_prompt}"
"""


async def _names(client: Client) -> list[str]:
    return [agent["name"] for agent in await client.list_agents()]


async def test_sighup_reloads_profiles_and_keeps_open_agents(folder: Path) -> None:
    text = config_text(folder, agents=_echo("echo", "v1") + _echo("old", "old"))
    async with daemon_process(folder, text) as daemon:
        async with connect(discovery_dir=folder) as client:
            assert await _names(client) == ["echo", "old"]
            before = await client.open("echo")
            assert (await before.run("hi")).output == "(system: v1) hi"
            orphan = await client.open("old")

            (folder / "bridge.toml").write_text(
                config_text(folder, agents=_echo("echo", "v2") + _echo("new", "new"))
            )
            daemon.signal(signal.SIGHUP)
            await daemon.wait_log("config reloaded from")
            assert await _names(client) == ["echo", "new"]
            # The agent opened before keeps its profile; a new one gets the new profile.
            assert (await before.run("hi")).output == "(system: v1) hi"
            # Its profile is gone from the config; the open agent keeps working.
            assert (await orphan.run("hi")).output == "(system: old) hi"
            after = await client.open("echo")
            assert (await after.run("hi")).output == "(system: v2) hi"
            assert (await (await client.open("new")).run("hi")).output == "(system: new) hi"
            with pytest.raises(DaemonError) as caught:
                await client.open("old")
            assert caught.value.rpc_code == -32011
        async with connect(discovery_dir=folder) as fresh:
            assert [agent["name"] for agent in fresh.profiles] == ["echo", "new"]

        # A broken config: one clear log line, the current profiles stay.
        (folder / "bridge.toml").write_text(
            config_text(folder, agents='[agents.bad]\nkind = "llm"\nprovider = "nope"\n')
        )
        daemon.signal(signal.SIGHUP)
        await daemon.wait_log("config reload failed")
        failure = [line for line in daemon.log().splitlines() if "reload failed" in line]
        assert len(failure) == 1
        assert failure[0].endswith(
            "ERROR oma_bridge.server: config reload failed; keeping the current config: "
            f"{folder / 'bridge.toml'}: agents.bad.provider: "
            "Input should be 'echo', 'anthropic' or 'openai'"
        )
        async with connect(discovery_dir=folder) as client:
            assert await _names(client) == ["echo", "new"]
            assert (await (await client.open("new")).run("ok")).output == "(system: new) ok"

        # [server] changes are reported and wait for a restart; the daemon keeps listening.
        (folder / "bridge.toml").write_text(
            config_text(folder, "max_connections = 3", _echo("echo", "v3"))
        )
        daemon.signal(signal.SIGHUP)
        await daemon.wait_log("[server] not applied: it differs from the running daemon's")
        async with connect(discovery_dir=folder) as client:
            assert await _names(client) == ["echo"]
        daemon.signal(signal.SIGTERM)
        with anyio.fail_after(10):
            assert await daemon.process.wait() == 0
