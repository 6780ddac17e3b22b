"""A daemon killed with SIGKILL while process and ACP agents run leaves nothing behind.

Two ways: its watchdog ends every descendant within seconds; and when the
watchdog dies with it (both SIGKILLed), the next daemon on the same state
folder reaps the leftover groups from the state file before it serves.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import anyio
import psutil
import pytest
from lifecycle.harness import (
    AGENTS_DIR,
    SCENARIO_AGENT,
    DaemonProcess,
    alive,
    config_text,
    daemon_process,
    describe,
    wait_all_gone,
)
from process.conftest import tree_pids

from oma_bridge.client import connect

pytestmark = pytest.mark.anyio

PROC_TREE = AGENTS_DIR / "proc_tree.py"

AGENTS = f"""
[agents.tree]
kind = "process"
command = "{sys.executable}"
args = ["{PROC_TREE}", "--ignore-term"]

[agents.demo]
kind = "acp"
command = "@python"
args = ["-m", "oma_bridge.demo.acp_agent"]
fs = "none"
permission = "reject"
"""


def named(processes: list[psutil.Process], text: str) -> list[psutil.Process]:
    """The ones whose command line holds ``text`` (gone ones are left out)."""
    found = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            if text in " ".join(process.cmdline()):
                found.append(process)
    return found


def _cmdlines(processes: list[psutil.Process]) -> list[str]:
    lines = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            lines.append(" ".join(process.cmdline()))
    return lines


@contextlib.asynccontextmanager
async def busy(daemon: DaemonProcess) -> AsyncIterator[list[psutil.Process]]:
    """Runs in flight on both kinds; yields every descendant of the daemon once all are up.

    The tree run never ends by itself (its child and grandchild sleep and
    ignore SIGTERM); the ACP run waits 30 s.  The runs' tasks end, with an
    error, when the daemon dies; they are cancelled at the end.
    """
    async with connect(discovery_dir=daemon.folder) as client, anyio.create_task_group() as tg:
        tree = await client.open("tree")
        demo = await client.open("demo")

        async def run(agent_run: Awaitable[object]) -> None:
            with contextlib.suppress(Exception):
                await agent_run

        tg.start_soon(run, tree.run("go"))
        tg.start_soon(run, demo.run("/wait 30"))
        with anyio.fail_after(15):
            while True:
                lines = _cmdlines(daemon.descendants())
                trees = sum("proc_tree.py" in line for line in lines)
                acps = sum("oma_bridge.demo.acp_agent" in line for line in lines)
                watchdogs = sum("supervision/watchdog.py" in line for line in lines)
                if trees >= 2 and acps >= 1 and watchdogs == 1:
                    break
                await anyio.sleep(0.05)
        # Give the ACP agent's turn a moment to be under way (not just spawned).
        await anyio.sleep(0.5)
        yield daemon.descendants()
        tg.cancel_scope.cancel()


async def test_sigkill_leaves_no_survivor(folder: Path) -> None:
    async with daemon_process(folder, config_text(folder, agents=AGENTS)) as daemon:
        async with busy(daemon) as descendants:
            assert len(descendants) >= 4, describe(descendants)
            daemon.signal(signal.SIGKILL)
            await daemon.process.wait()
            survivors = await wait_all_gone(descendants, within=5)
        assert survivors == [], describe(survivors)
    # The watchdog removed its state file on the way out.
    assert list((folder / "state" / "oma-bridge").glob("*.state")) == []


async def test_next_start_reaps_what_a_dead_daemon_and_watchdog_left(folder: Path) -> None:
    state_dir = folder / "state" / "oma-bridge"
    leftovers: list[psutil.Process] = []
    try:
        async with (
            daemon_process(folder, config_text(folder, agents=AGENTS)) as daemon,
            busy(daemon) as descendants,
        ):
            watchdog = named(descendants, "supervision/watchdog.py")
            tree = named(descendants, "proc_tree.py")
            assert len(watchdog) == 1 and len(tree) == 2, describe(descendants)
            # An OOM kill of both: the watchdog first, so nobody ends the children.
            watchdog[0].kill()
            daemon.signal(signal.SIGKILL)
            await daemon.process.wait()
            # The tree ignores SIGTERM and nobody is left to send SIGKILL.
            await anyio.sleep(1)
            leftovers = alive(tree)
            assert len(leftovers) == 2, describe(tree)
        assert len(list(state_dir.glob("*.state"))) == 1
        # The harness's clean-up kills only descendants of a live daemon: these are orphans.
        assert len(alive(leftovers)) == 2, describe(leftovers)

        # SIGKILL left the old discovery file behind; the harness waits for the
        # one that names the new daemon.
        assert (folder / "bridge.json").exists()
        async with daemon_process(folder, config_text(folder, agents=AGENTS)) as second:
            survivors = await wait_all_gone(leftovers, within=5)
            assert survivors == [], describe(survivors)
            await second.wait_log("reaped the processes of 1 earlier daemon(s)")
            # The dead daemon's state file is gone (the new one writes its own at its first spawn).
            assert list(state_dir.glob("*.state")) == []
            async with connect(discovery_dir=folder) as client:
                assert (await client.status())["processes"] == []
    finally:
        for process in alive(leftovers):
            with contextlib.suppress(psutil.Error):
                process.kill()


TERMINAL_AGENTS = f"""
[agents.coder]
kind = "acp"
command = "@python"
args = ["{SCENARIO_AGENT}"]
terminal = true
"""


async def test_sigkill_ends_the_terminals_of_acp_agents(folder: Path) -> None:
    # A terminal/* command was once a bare child of the daemon: untagged and
    # unknown to the watchdog, it outlived a SIGKILL of the daemon.
    pids: dict[str, int] = {}
    try:
        async with (
            daemon_process(folder, config_text(folder, agents=TERMINAL_AGENTS)) as daemon,
            connect(discovery_dir=daemon.folder) as client,
            anyio.create_task_group() as tg,
        ):
            agent = await client.open("coder")
            text = ""

            async def run() -> None:
                nonlocal text
                with contextlib.suppress(Exception):  # the daemon dies under the run
                    async for event in agent.stream("terminaltree hang --ignore-term --escape"):
                        if event.type == "text":
                            text += event.data

            tg.start_soon(run)
            with anyio.fail_after(20):
                while len(pids := tree_pids(text)) < 2:  # noqa: ASYNC110 (a poll)
                    await anyio.sleep(0.05)
            terminal = [psutil.Process(pid) for pid in pids.values()]
            agent_process = named(daemon.descendants(), "acp_scenario_agent.py")
            assert len(agent_process) == 1, describe(daemon.descendants())
            daemon.signal(signal.SIGKILL)
            await daemon.process.wait()
            survivors = await wait_all_gone([*terminal, *agent_process], within=5)
            assert survivors == [], describe(survivors)
            tg.cancel_scope.cancel()
    finally:
        for pid in pids.values():
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
