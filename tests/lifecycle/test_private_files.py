"""Every file and folder a daemon creates is private, whatever the umask (issue 22).

A real daemon, started under ``umask 000`` and ``022`` with state and runtime
folders that do not exist yet, makes them, its crash record, a session file,
the audit log and an evaluation store; then every path it created is walked.
"""

from __future__ import annotations

import signal
import stat
from pathlib import Path

import anyio
import pytest

from oma_bridge.client import connect

from .harness import config_text, daemon_process

pytestmark = pytest.mark.anyio

AGENTS = """
[evaluation]
scorers = ["success"]
store_payloads = "full"

[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"

[agents.cat]
kind = "process"
command = "cat"
"""


def not_private(root: Path, own: set[Path]) -> list[str]:
    """Every path under ``root`` (but the test's ``own``) that group or others may touch."""
    found = []
    for path in [root, *root.rglob("*")]:
        if path in own:
            continue
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode & 0o077:
            found.append(f"{path.relative_to(root)}: {mode:04o}")
    return found


def created(folder: Path, state: Path) -> set[str]:
    """The names of what the daemon made in ``folder`` and its state folder."""
    names = {path.name for path in [*folder.iterdir(), *state.iterdir()]}
    if any(name.endswith(".state") for name in names):
        names.add("a crash record")
    if any((state / "sessions").iterdir()):
        names.add("a session")
    return names


@pytest.mark.parametrize("umask", [0o000, 0o022], ids=lambda umask: f"umask {umask:03o}")
async def test_nothing_the_daemon_creates_is_open_to_others(folder: Path, umask: int) -> None:
    state_home = folder / "xdg" / "state"  # neither it nor its parent exists yet
    text = config_text(folder, server='tcp = "127.0.0.1:0"', agents=AGENTS)
    own = {folder / "bridge.toml", folder / "daemon.log"}  # the test's files
    env = {"XDG_STATE_HOME": str(state_home)}
    async with daemon_process(folder, text, env=env, umask=umask) as daemon:
        async with connect(discovery_dir=folder) as client:
            cat = await client.open("cat")
            assert (await cat.run("through a process")).success
            assert (await (await client.open("echo")).run("through an llm")).success
            assert (await client.run_agent("echo", "evaluated")).success
            with anyio.fail_after(10):
                while (await client.status())["evaluation"]["completed"] < 1:  # noqa: ASYNC110
                    await anyio.sleep(0.02)
        # The crash record, a session, the audit log, the evaluation store are there.
        made = created(folder, state_home / "oma-bridge")
        assert {"audit.jsonl", "evaluations.jsonl", "sessions", "bridge.sock"} <= made, made
        assert {"a session", "a crash record"} <= made, made
        assert not_private(folder, own) == []
        daemon.signal(signal.SIGTERM)
        with anyio.fail_after(15):
            await daemon.process.wait()
    assert daemon.process.returncode == 0, daemon.log()
    assert not_private(folder, own) == []
    # The folders it made above its own are private too.
    assert stat.S_IMODE((folder / "xdg").stat().st_mode) == 0o700
