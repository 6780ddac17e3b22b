"""The price of ``cwd = "worktree"``: an ``agent/open`` that makes a git worktree, and its close.

A daemon (``oma-bridge serve`` in a subprocess) and a client on its unix
socket.  In the same run, in rounds whose order is shuffled each time (a
noisy neighbour hits every contender alike), each contender opens an agent
and closes it again:

* **baseline**: ``agent/open`` of a process profile with ``cwd = "client"``
  and the repository's folder as its ``cwd`` (a normal cwd: checked against
  the workspace roots, nothing made), then ``agent/close``;
* **worktree, 10 files**: the same with ``cwd = "worktree"`` on a repository
  of 10 small files: the open makes the worktree (``git rev-parse`` twice,
  ``git worktree add -b``, the record), the close finds it unchanged
  (``status``, ``rev-parse``, ``rev-list``) and removes it with its branch;
* **worktree, 2,000 files**: the same on a repository of 2,000 files of
  2 KB (a 4 MB checkout);
* **info: git alone**: ``git worktree add -b`` + ``git worktree remove
  --force`` + ``git branch -D`` on each repository with
  ``create_subprocess_exec``: what git itself costs, without the daemon.

Reported: the median and best round of ``agent/open`` and of
``agent/close`` in milliseconds, and the open's and the whole cycle's ratios
to the baseline's.  No agent runs: the process agent only starts on a run,
so the baseline is the daemon's own open and close.

Run: ``.venv/bin/python bench/bench_worktree.py [--cycles 10] [--rounds 15]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from _util import machine, print_table
from bench_daemon import daemon

from oma_bridge.client import Client, connect

GIT = shutil.which("git") or "git"
_IDENTITY = ("-c", "user.name=Bench", "-c", "user.email=bench@example.invalid")

AGENTS = """
[agents.plain]
kind = "process"
command = "cat"
cwd = "client"

[agents.tree]
kind = "process"
command = "cat"
cwd = "worktree"
"""


def repository(folder: Path, files: int) -> Path:
    """A repository of ``files`` files of 2 KB, one commit."""
    folder.mkdir(parents=True)
    for index in range(files):
        part = folder / f"d{index % 20}"
        part.mkdir(exist_ok=True)
        (part / f"f{index}.txt").write_text(f"{index}\n" * 400)
    for args in (("init", "-q"), ("add", "-A"), ("commit", "-q", "-m", "start")):
        subprocess.run([GIT, *_IDENTITY, *args], cwd=folder, check=True)
    return folder


def cycle(client: Client, profile: str, cwd: Path) -> Callable[[], Awaitable[tuple[float, float]]]:
    """Seconds of one ``agent/open`` and of its ``agent/close``."""

    async def once() -> tuple[float, float]:
        start = time.perf_counter()
        opened = await client.request("agent/open", {"profile": profile, "cwd": str(cwd)})
        middle = time.perf_counter()
        await client.request("agent/close", {"agentId": opened["agentId"]})
        return middle - start, time.perf_counter() - middle

    return once


def bare_git(repo: Path, into: Path) -> Callable[[], Awaitable[tuple[float, float]]]:
    """Seconds of ``git worktree add -b`` and of ``worktree remove`` + ``branch -D``."""
    counter = iter(range(10**9))
    head = subprocess.run(
        [GIT, "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()

    async def git(*args: str) -> None:
        process = await asyncio.create_subprocess_exec(GIT, *args, cwd=repo)
        if await process.wait() != 0:
            raise RuntimeError(f"git {' '.join(args)} failed")

    tag = repo.name

    async def once() -> tuple[float, float]:
        name = f"bare-{tag}{next(counter)}"
        path = str(into / name)
        start = time.perf_counter()
        await git("worktree", "add", "--quiet", "--no-track", "-b", f"oma/{name}", path, head)
        middle = time.perf_counter()
        await git("worktree", "remove", "--force", path)
        await git("branch", "-q", "-D", f"oma/{name}")
        return middle - start, time.perf_counter() - middle

    return once


async def main(cycles: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="oma-bench-wt-", dir="/tmp") as name:
        folder = Path(name)
        small = repository(folder / "small", 10)
        large = repository(folder / "large", 2000)
        (folder / "bare").mkdir()
        server = f'workspace_roots = ["{folder}"]'
        async with daemon(server=server, agents=AGENTS) as d, connect(socket=d.socket) as client:
            contenders: list[tuple[str, Callable[[], Awaitable[tuple[float, float]]]]] = [
                ('baseline: agent/open + close, cwd = "client"', cycle(client, "plain", small)),
                ('cwd = "worktree", 10 files', cycle(client, "tree", small)),
                ('cwd = "worktree", 2,000 files (4 MB)', cycle(client, "tree", large)),
                ("info: git alone, 10 files", bare_git(small, folder / "bare")),
                ("info: git alone, 2,000 files", bare_git(large, folder / "bare")),
            ]
            for _, fn in contenders:
                for _ in range(3):
                    await fn()  # warm-up: imports, the watchdog, git's caches
            opens: list[list[float]] = [[] for _ in contenders]
            closes: list[list[float]] = [[] for _ in contenders]
            order = list(range(len(contenders)))
            shuffle = random.Random(0).shuffle
            load_before = os.getloadavg()[0]
            for _ in range(rounds):
                shuffle(order)
                for index in order:
                    spent = [await contenders[index][1]() for _ in range(cycles)]
                    opens[index].append(sum(o for o, _ in spent) / cycles)
                    closes[index].append(sum(c for _, c in spent) / cycles)
            load_after = os.getloadavg()[0]
    base_open = statistics.median(opens[0])
    base_cycle = base_open + statistics.median(closes[0])
    rows = []
    for (label, _), out, back in zip(contenders, opens, closes, strict=True):
        median_open, median_close = statistics.median(out), statistics.median(back)
        rows.append(
            [
                label,
                f"{median_open * 1e3:.2f}",
                f"{min(out) * 1e3:.2f}",
                f"{median_close * 1e3:.2f}",
                f"{median_open / base_open:.1f}x",
                f"{(median_open + median_close) / base_cycle:.1f}x",
            ]
        )
    print(
        f"{machine()}; {cycles * rounds} open/close cycles each; git {_git_version()}; "
        f"load average {load_before:.2f} at the start, {load_after:.2f} at the end"
    )
    print()
    headers = [
        "contender",
        "open ms (median)",
        "open ms (best)",
        "close ms (median)",
        "open ratio",
        "open + close ratio",
    ]
    print_table(headers, rows)


def _git_version() -> str:
    done = subprocess.run([GIT, "--version"], capture_output=True, text=True, check=True)
    return done.stdout.split()[-1]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=15)
    arguments = parser.parse_args()
    anyio.run(main, arguments.cycles, arguments.rounds)
