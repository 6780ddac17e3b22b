"""A process agent that leaves a tree behind: a child and a grandchild.

Each prints ``child <pid>`` / ``grandchild <pid>`` on its own line, then
sleeps.  Flags: ``--ignore-term`` (both ignore SIGTERM), ``--escape`` (the
grandchild double-forks into a new session, away from the group and the
tree), ``--exit`` (the child exits once both lines are out), ``--quiet-grandchild``
(the grandchild closes stdout and stderr, so it holds none of our pipes).
"""

from __future__ import annotations

import os
import signal
import sys
import time

flags = set(sys.argv[1:])
if "--ignore-term" in flags:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

ready_read, ready_write = os.pipe()
if os.fork() == 0:
    os.close(ready_read)
    if "--escape" in flags:
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
    print(f"grandchild {os.getpid()}", flush=True)
    os.write(ready_write, b"x")
    if "--quiet-grandchild" in flags:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
    time.sleep(60)
    os._exit(0)

os.close(ready_write)
os.read(ready_read, 1)
print(f"child {os.getpid()}", flush=True)
if "--exit" in flags:
    sys.exit(0)
time.sleep(60)
