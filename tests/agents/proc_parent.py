"""A stand-in daemon: supervises ``proc_tree.py`` and waits to be killed.

Usage: ``proc_parent.py <state dir or -> [proc_tree flags...]``.  Prints one
line ``{"parent", "watchdog", "child", "grandchild"}`` (pids, as JSON) once
the tree runs, then sleeps until it is killed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio

from oma_bridge.supervision.supervisor import Supervisor

TREE = str(Path(__file__).with_name("proc_tree.py"))


async def main() -> None:
    state_dir = None if sys.argv[1] == "-" else Path(sys.argv[1])
    supervisor = Supervisor(state_dir=state_dir)
    process = await supervisor.spawn([sys.executable, TREE, *sys.argv[2:]], stdin=False)
    pids: dict[str, int] = {}
    buffered = b""
    while len(pids) < 2:
        buffered += await process.stdout.receive()
        *lines, buffered = buffered.split(b"\n")
        for line in lines:
            role, pid = line.decode().split()
            pids[role] = int(pid)
    report = {"parent": os.getpid(), "watchdog": supervisor.watchdog_pid, **pids}
    print(json.dumps(report), flush=True)
    await anyio.sleep(600)


anyio.run(main)
