"""``oma-bridge run --detach``, ``oma-bridge watch`` and ``oma-bridge audit`` against a real daemon.

The daemon is a subprocess on ``$XDG_RUNTIME_DIR/oma-bridge/bridge.sock``, so
the CLI finds it by its discovery file as a user's shell would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import orjson
import pytest
from lifecycle.conftest import folder
from lifecycle.harness import AGENTS_DIR, DaemonProcess, config_text, daemon_process

from oma_bridge.client import Client, DaemonError, connect

__all__ = ["folder"]

pytestmark = pytest.mark.anyio

#: Prints "first", waits for the file its prompt names, prints "second".
SLOW = (
    "import pathlib, sys, time; release = pathlib.Path(sys.stdin.read().strip()); "
    "print('first'); [time.sleep(0.02) for _ in iter(release.exists, True)]; print('second')"
)

AGENTS = f"""
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"

[agents.wordcount]
kind = "process"
command = "wc"
args = ["-w"]

[agents.slow]
kind = "process"
command = "{sys.executable}"
args = ["-uc", "{SLOW}"]

[agents.asker]
kind = "acp"
command = "{sys.executable}"
args = ["{AGENTS_DIR / "acp_scenario_agent.py"}"]
env = {{ PYTHONUNBUFFERED = "1" }}
"""


@dataclass
class Setup:
    daemon: DaemonProcess
    env: dict[str, str]
    client: Client


@pytest.fixture
def runtime(folder: Path) -> Iterator[Path]:
    """``$XDG_RUNTIME_DIR``: the daemon's socket and discovery file go to its ``oma-bridge/``."""
    path = folder / "run"
    (path / "oma-bridge").mkdir(parents=True, mode=0o700)
    yield path


@asynccontextmanager
async def setup(runtime: Path) -> AsyncIterator[Setup]:
    home = runtime / "oma-bridge"
    async with daemon_process(home, config_text(home, "", AGENTS)) as daemon:
        env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "XDG_STATE_HOME": str(home / "state")}
        async with connect(discovery_dir=home) as client:
            yield Setup(daemon, env, client)


async def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[bytes]:
    with anyio.fail_after(30):
        return await anyio.run_process(
            [sys.executable, "-m", "oma_bridge.cli", *args], env=env, check=False
        )


async def test_run_detach_prints_the_ids_and_the_run_finishes(runtime: Path) -> None:
    async with setup(runtime) as s:
        done = await cli(s.env, "run", "wordcount", "--detach", "a b c")
        assert done.returncode == 0, done.stderr
        agent_id, run_id = done.stdout.decode().split()
        assert agent_id.startswith("agt_") and len(run_id) == 32
        with anyio.fail_after(10):
            while True:
                try:
                    result = await s.client.request("run/result", {"runId": run_id})
                    break
                except DaemonError as error:
                    assert error.rpc_code == -32014  # still running: not an unknown run
                    await anyio.sleep(0.05)
        assert result["success"] and result["output"].split() == ["3"]
        # The agent stays open for whoever comes next.
        rows = (await s.client.status())["agents"]
        assert [row["agentId"] for row in rows] == [agent_id]


async def test_watch_prints_a_live_agents_text_as_it_streams(runtime: Path) -> None:
    async with setup(runtime) as s:
        agent = await s.client.open("echo")
        await agent.run("an earlier run")
        latest = (await s.client.request("agent/watch", {"agentId": agent.agent_id}))["seq"]
        await s.client.request("agent/unwatch", {"agentId": agent.agent_id})
        command = [sys.executable, "-m", "oma_bridge.cli", "watch", agent.agent_id, "--follow"]
        command += ["--after-seq", str(latest)]  # from here: nothing can fall in between
        process = await anyio.open_process(command, env=s.env, stderr=subprocess.PIPE)
        try:
            assert process.stdout is not None
            printed = b""
            with anyio.fail_after(15):
                async for event in agent.stream("live words from the test"):
                    assert event.type in ("text", "done")
                while b"live words from the test\n" not in printed:
                    printed += await process.stdout.receive()
            assert printed == b"live words from the test\n"  # the earlier run is not replayed
        finally:
            process.terminate()
            with anyio.fail_after(10):
                await process.wait()
            await process.aclose()


async def test_watch_prints_what_the_journal_holds_and_exits(runtime: Path) -> None:
    async with setup(runtime) as s:
        fresh = await s.client.open("echo")
        nothing = await cli(s.env, "watch", fresh.agent_id)
        assert (nothing.returncode, nothing.stdout) == (0, b""), nothing.stderr
        agent = await s.client.open("echo")
        await agent.run("an earlier run")
        await agent.run("a later one")
        held = await cli(s.env, "watch", agent.agent_id)
        assert held.returncode == 0, held.stderr
        assert held.stdout == b"an earlier run\na later one\n"
        first_end = next(
            e.seq for e in await s.client.journal(agent.agent_id) if e.type == "run_end"
        )
        after = await cli(s.env, "watch", agent.agent_id, "--after-seq", str(first_end))
        assert after.stdout == b"a later one\n"


async def test_watch_follows_a_run_in_flight_to_its_end_and_result_prints_it(
    runtime: Path,
) -> None:
    release = runtime / "release"
    async with setup(runtime) as s:
        started = await cli(s.env, "run", "slow", "--detach", str(release))
        agent_id, run_id = started.stdout.decode().split()
        running = await cli(s.env, "result", run_id)  # it waits for the release: still going
        assert running.returncode == 1
        assert f"run {run_id} is still running".encode() in running.stderr
        command = [sys.executable, "-m", "oma_bridge.cli", "watch", agent_id]
        process = await anyio.open_process(command, env=s.env, stderr=subprocess.PIPE)
        try:
            assert process.stdout is not None
            printed = b""
            with anyio.fail_after(20):
                while b"first\n" not in printed:
                    printed += await process.stdout.receive()
                release.touch()  # the run ends: the watch follows it there, then exits
                async for chunk in process.stdout:
                    printed += chunk
                assert await process.wait() == 0
        finally:
            if process.returncode is None:
                process.kill()
            await process.aclose()
        assert printed == b"first\nsecond\n\n"  # the run's text, a newline at its end
        done = await cli(s.env, "result", run_id)
        assert (done.returncode, done.stdout) == (0, b"first\nsecond\n"), done.stderr
        as_json = orjson.loads((await cli(s.env, "result", run_id, "--json")).stdout)
        assert as_json["runId"] == run_id and as_json["success"] is True
        unknown = await cli(s.env, "result", "no-such-run")
        assert unknown.returncode == 2 and b"no-such-run" in unknown.stderr


async def test_audit_prints_the_permission_records_of_one_agent(runtime: Path) -> None:
    async with setup(runtime) as s:
        first = await s.client.open("asker")
        other = await s.client.open("asker")
        for agent in (first, other):
            # Nobody to ask on this connection: the least-privilege reject, by "no-client".
            assert (await agent.prompt("tools", run_id=f"run-{agent.agent_id}")).success
        done = await cli(s.env, "audit", "--agent", first.agent_id)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.decode().splitlines()
        assert lines[0].split() == ["TIME", "EVENT", "AGENT", "RUN", "DETAIL"]
        # The agent's spawn (its ACP process) is in the log too; one permission record.
        assert {line.split()[2] for line in lines[1:]} == {first.agent_id}
        (row,) = [line for line in lines[1:] if line.split()[1] == "permission"]
        assert row.split()[1:4] == ["permission", first.agent_id, f"run-{first.agent_id}"]
        assert "decidedBy=no-client" in row
        assert 'outcome={"outcome":"selected","optionId":"ro"}' in row
        assert '"toolCallId":"t1"' in row
        everything = await cli(s.env, "audit")
        rows = everything.stdout.decode().splitlines()[1:]
        assert [row.split()[1] for row in rows].count("permission") == 2


async def test_run_detach_with_input_the_agent_refuses_says_so_at_once(
    runtime: Path, folder: Path
) -> None:
    image = folder / "dot.png"
    image.write_bytes(bytes.fromhex("89504e470d0a1a0a"))
    async with setup(runtime) as s:
        with anyio.fail_after(8):  # not the ten seconds of waiting for a run that never was
            done = await cli(s.env, "run", "wordcount", "--detach", "--image", str(image), "hi")
        assert done.returncode == 2, done.stderr
        assert b"InvalidMessageError" in done.stderr and b"Traceback" not in done.stderr
