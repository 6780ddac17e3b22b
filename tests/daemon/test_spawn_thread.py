"""The daemon forks its children off the loop's thread; a library caller, on it.

A loaded daemon's forks took a third of its loop (docs/benchmarks.md, "Load"):
its supervisor forks in a worker thread while the loop serves everyone else.
A library caller's default supervisor forks on the loop's thread, the fastest
single run (supervision/child_transport.py).
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from oma_bridge.client import connect
from oma_bridge.supervision.supervisor import default_supervisor

from .conftest import daemon

pytestmark = pytest.mark.anyio


async def test_the_daemons_process_runs_fork_off_the_loops_thread(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[threading.Thread] = []
    real_popen = subprocess.Popen

    def recording_popen(argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        if argv[0] == "cat":  # not the crash watchdog, started at the first spawn
            threads.append(threading.current_thread())
        return real_popen(argv, **kwargs)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        assert default_supervisor().fork_off_loop
        agent = await client.open("catter")
        assert (await agent.run("hello")).output == "hello"
    assert len(threads) == 1
    assert threads[0] is not threading.main_thread()
