"""A real daemon *subprocess* for the lifecycle tests, and what they check about it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import orjson
import psutil

AGENTS_DIR = Path(__file__).resolve().parent.parent / "agents"
SCENARIO_AGENT = AGENTS_DIR / "acp_scenario_agent.py"


def config_text(folder: Path, server: str = "", agents: str = "") -> str:
    return f'[server]\nsocket = "{folder}/bridge.sock"\n{server}\n{agents}'


#: ``python -c`` of this, then the command: set a limit, become the command.
_EXEC_WITH_LIMIT = "import os, resource, sys; %s; os.execv(sys.argv[1], sys.argv[1:])"


@dataclass
class DaemonProcess:
    """A started daemon: its process, folder and log."""

    process: anyio.abc.Process
    folder: Path
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def discovery(self) -> Path:
        return self.folder / "bridge.json"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.pid).children(recursive=True)

    def signal(self, signum: signal.Signals) -> None:
        self.process.send_signal(signum)

    async def wait_log(self, text: str, within: float = 10) -> None:
        with anyio.fail_after(within):
            while text not in self.log():  # noqa: ASYNC110 (a poll of another process's file)
                await anyio.sleep(0.05)


@contextlib.asynccontextmanager
async def daemon_process(
    folder: Path,
    text: str,
    *,
    env: Mapping[str, str] | None = None,
    umask: int = -1,
    nofile: tuple[int, int] | None = None,
) -> AsyncIterator[DaemonProcess]:
    """Start a daemon on ``folder/bridge.toml`` = ``text``; ready once its discovery file exists.

    ``umask`` is the daemon's (-1: this process's); ``nofile`` its
    ``RLIMIT_NOFILE`` (soft, hard) as it starts (set by a Python that then
    becomes the daemon, with the same pid).

    At the end it is killed if it still runs, and so is every process it left.
    """
    config = folder / "bridge.toml"
    config.write_text(text)
    log_path = folder / "daemon.log"
    command = [sys.executable, "-m", "oma_bridge.cli", "serve", "--config", str(config)]
    if nofile is not None:
        limit = f"resource.setrlimit(resource.RLIMIT_NOFILE, {nofile!r})"
        command = [sys.executable, "-c", f"{_EXEC_WITH_LIMIT % limit}", *command]
    with log_path.open("wb") as log:
        process = await anyio.open_process(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            # The process state file of the daemon goes to a folder of this test.
            env={**os.environ, "XDG_STATE_HOME": str(folder / "state"), **(env or {})},
            umask=umask,
        )
    daemon = DaemonProcess(process, folder, log_path)
    seen: list[psutil.Process] = []
    try:
        with anyio.fail_after(20):
            # Ready once the discovery file names *this* daemon: a killed one
            # (a chaos test) leaves its own file behind.
            while _discovery_pid(daemon.discovery) != process.pid:
                if process.returncode is not None:
                    raise AssertionError(f"the daemon exited at start:\n{daemon.log()}")
                await anyio.sleep(0.02)
        yield daemon
    finally:
        with contextlib.suppress(psutil.Error):
            seen = daemon.descendants()
        if process.returncode is None:
            process.kill()
            await process.wait()
        for leftover in seen:
            with contextlib.suppress(psutil.Error):
                leftover.kill()
        await process.aclose()


def _discovery_pid(path: Path) -> int | None:
    try:
        return int(orjson.loads(path.read_bytes())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent, or being written


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    """The ones still running (a zombie counts as gone; start times guard against pid reuse)."""
    living = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                living.append(process)
        except psutil.NoSuchProcess:
            continue
    return living


async def wait_all_gone(processes: list[psutil.Process], within: float) -> list[psutil.Process]:
    """Wait up to ``within`` seconds for every process to end; returns the survivors."""
    deadline = time.monotonic() + within
    while alive(processes) and time.monotonic() < deadline:  # noqa: ASYNC110 (a poll)
        await anyio.sleep(0.05)
    return alive(processes)


def describe(processes: list[psutil.Process]) -> list[Any]:
    described = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            described.append((process.pid, process.cmdline()))
    return described
