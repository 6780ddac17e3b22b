"""The daemon forks its children off the loop's thread; a library caller, on it.

A loaded daemon's forks took a third of its loop (docs/benchmarks.md, "Load"):
its supervisor forks in a worker thread while the loop serves everyone else.
A library caller's default supervisor forks on the loop's thread, the fastest
single run (supervision/child_transport.py).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from oma_bridge.client import connect
from oma_bridge.supervision.supervisor import default_supervisor

from .conftest import daemon

pytestmark = pytest.mark.anyio


async def test_the_daemons_process_runs_fork_off_the_loops_thread(
    short_dir: Path, popen_threads: dict[str, list[threading.Thread]]
) -> None:
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        assert default_supervisor().fork_off_loop
        agent = await client.open("catter")
        assert (await agent.run("hello")).output == "hello"
    [thread] = popen_threads["cat"]
    assert thread is not threading.main_thread()
