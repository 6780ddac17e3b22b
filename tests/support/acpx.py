"""Running ``acpx`` (openclaw/acpx, a headless ACP client CLI) in tests.

acpx keeps its state under ``$HOME/.acpx``: every run gets a private HOME
(the ``acpx_home`` fixture of ``tests/conftest.py``, which also kills the
queue owners that persistent sessions leave behind, and removes their
sockets).  :func:`run_acpx` runs one invocation in its own process group,
bounded in time, and kills whatever it left in that group.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import psutil

__all__ = ["clean_acpx_home", "queue_owners", "run_acpx", "wait_queue_owners_gone"]


def run_acpx(
    acpx: list[str],
    home: Path,
    *args: str,
    cwd: Path,
    timeout_s: float = 60,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``acpx *args`` with ``HOME=home`` (and ``env`` added); stdout and stderr as text."""
    full_env = {**os.environ, **(env or {}), "HOME": str(home)}
    process = subprocess.Popen(
        [*acpx, *args],
        cwd=cwd,
        env=full_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        raise AssertionError(f"acpx {args} timed out; stderr:\n{stderr[-2000:]}") from None
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # anything it left in its own group
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def queue_owners(home: Path) -> list[int]:
    """The pids of the live queue owners of ``home``.

    Persistent sessions run a detached queue owner (its own session, the agent in its
    group) that lives ``--ttl`` seconds after its last prompt; its lock file names its pid.
    """
    owners = []
    for lock in (home / ".acpx" / "queues").glob("*.lock"):
        with contextlib.suppress(OSError, ValueError, KeyError, psutil.Error):
            pid = int(json.loads(lock.read_text())["pid"])
            if "__queue-owner" in psutil.Process(pid).cmdline():
                owners.append(pid)
    return owners


def wait_queue_owners_gone(home: Path, timeout_s: float = 15) -> None:
    """Wait for the queue owners of ``home`` to exit (an acpx run meanwhile may be refused)."""
    deadline = time.monotonic() + timeout_s
    while queue_owners(home):
        assert time.monotonic() < deadline, f"acpx queue owners still running: {queue_owners(home)}"
        time.sleep(0.1)


def clean_acpx_home(home: Path) -> None:
    """Kill the queue owners of ``home`` (only those) and remove their sockets."""
    for pid in queue_owners(home):
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
    # queue sockets live in /tmp/acpx-<sha256(HOME)[:10]>/
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:10]
    with contextlib.suppress(OSError):
        for socket in (Path("/tmp") / f"acpx-{digest}").iterdir():
            socket.unlink()
        (Path("/tmp") / f"acpx-{digest}").rmdir()
