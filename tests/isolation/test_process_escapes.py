"""A sandboxed process agent tries to get out, through a real daemon: every attempt fails.

The agent (``tests/agents/sandbox_probe.py``) runs under ``sandbox = "bwrap"``
in a daemon subprocess whose home folder is one of this test's.  From inside
it tries to read a file planted in the home folder and the daemon's
discovery file, to write into the home folder, ``/usr`` and the daemon's
state folder, to signal the daemon and another agent's process, and to reach
a TCP server the test runs on loopback.  Each fails (what it wrote landed
nowhere outside), while the same agent reads and writes its own folder and,
with ``network = true``, reaches the server.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import psutil
import pytest
from lifecycle.harness import AGENTS_DIR, config_text, daemon_process

from oma_bridge.client import connect

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("require_bwrap")]

PROBE = AGENTS_DIR / "sandbox_probe.py"
#: The interpreter itself, not the venv's link to it: the sandbox shows its prefix.
PYTHON = os.path.realpath(sys.executable)


def profiles(home: Path, project: Path) -> str:
    common = f"""
command = "{PYTHON}"
args = ["-I", "-S", "{PROBE}"]
cwd = "{project}"
sandbox = "bwrap"
sandbox_read = ["{sys.base_prefix}", "{AGENTS_DIR}", "~/.cache/tool"]
"""
    return f"""
[agents.closed]
kind = "process"
network = false
{common}
[agents.open]
kind = "process"
{common}
[agents.sleeper]
kind = "process"
command = "sleep"
args = ["30"]
input = "none"
"""


@contextlib.asynccontextmanager
async def echo_server() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A TCP server on 127.0.0.1 that answers ``pong`` and records what it got."""
    received: list[bytes] = []

    async def serve(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            received.append(await stream.receive())
            await stream.send(b"pong")

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        yield port, received
        tg.cancel_scope.cancel()


def outcomes(output: str) -> dict[str, dict[str, Any]]:
    found = {}
    for line in output.splitlines():
        record = json.loads(line)
        found[record["attempt"]] = record
    return found


async def test_every_escape_fails_and_the_own_folder_works(folder: Path) -> None:
    home = folder / "home"
    project = home / "project"
    (home / ".ssh").mkdir(parents=True)
    (home / ".cache" / "tool").mkdir(parents=True)
    project.mkdir()
    planted = home / ".ssh" / "id_planted"
    planted.write_text("PLANTED-" + secrets.token_hex(8))
    (home / ".cache" / "tool" / "allowed.txt").write_text("allowed")
    (project / "mine.txt").write_text("my own file")
    state = folder / "state" / "oma-bridge"
    evil = {
        "home": home / "written-by-agent",
        "usr": Path("/usr") / f"oma-sandbox-{secrets.token_hex(4)}",
        "state": state / "written-by-agent",
    }
    env = {"HOME": str(home)}
    async with (
        daemon_process(
            folder, config_text(folder, agents=profiles(home, project)), env=env
        ) as daemon,
        connect(discovery_dir=folder) as client,
        echo_server() as (port, received),
        anyio.create_task_group() as tg,
    ):
        token = json.loads(daemon.discovery.read_text())["token"]
        sleeper = await client.open("sleeper")
        tg.start_soon(sleeper.run, "go")
        with anyio.fail_after(10):
            while not (others := (await client.status())["processes"]):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        other_pid = others[0]["pid"]
        plan = {
            "read": [str(planted), str(daemon.discovery), str(project / "mine.txt")],
            "write": [*(str(path) for path in evil.values()), str(project / "out.txt")],
            "signal": [daemon.pid, other_pid],
            "connect": [port],
            "environ": ["OMA_BRIDGE_TOKEN"],
        }
        plan["read"].append(str(home / ".cache" / "tool" / "allowed.txt"))
        closed = await client.open("closed")
        result = await closed.run(json.dumps(plan))
        assert result.success, result.to_wire()
        seen = outcomes(result.output)

        # Nothing outside got through.
        for path in (planted, daemon.discovery):
            assert not seen[f"read {path}"]["ok"], seen
        assert token not in result.output
        for path in evil.values():
            assert not path.exists(), f"{path} was written from inside the sandbox: {seen}"
        assert "Read-only file system" in seen[f"write {evil['usr']}"]["error"]
        for pid in (daemon.pid, other_pid):
            assert seen[f"signal {pid}"]["error"].startswith("ProcessLookupError"), seen
        assert daemon.process.returncode is None and psutil.pid_exists(other_pid)
        assert (await client.status())["processes"][0]["pid"] == other_pid
        assert not seen[f"connect {port}"]["ok"] and received == [], seen
        assert not seen["environ OMA_BRIDGE_TOKEN"]["ok"]

        # Its own folder, and the one path of the home folder it was given.
        assert seen[f"read {project / 'mine.txt'}"]["detail"] == "my own file"
        assert (project / "out.txt").read_text() == "written from inside the sandbox\n"
        assert seen[f"read {home / '.cache' / 'tool' / 'allowed.txt'}"]["detail"] == "allowed"

        # The same agent with network = true reaches the server.
        opened = await client.open("open")
        result = await opened.run(json.dumps({"connect": [port]}))
        assert outcomes(result.output)[f"connect {port}"] == {
            "attempt": f"connect {port}",
            "ok": True,
            "detail": "pong",
        }
        assert received == [b"from inside\n"]
        tg.cancel_scope.cancel()
