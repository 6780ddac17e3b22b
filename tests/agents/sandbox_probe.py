"""A process agent that tries to get out of its sandbox (``tests/isolation``).

Its prompt (stdin) is a JSON plan: ``{"read": [paths], "write": [paths],
"signal": [pids], "connect": [ports on 127.0.0.1], "environ": [names]}``.
Each attempt prints one JSON line, ``{"attempt", "ok", "detail"|"error"}``,
so that the test sees what got through and what did not, and why.
Standard library only: it runs as ``python -I -S``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path


def attempt(name: str, action: Callable[[], object]) -> None:
    try:
        detail = action()
    except Exception as error:  # every failure is the finding, not a crash
        failure = f"{type(error).__name__}: {error}"
        print(json.dumps({"attempt": name, "ok": False, "error": failure}))
    else:
        print(json.dumps({"attempt": name, "ok": True, "detail": str(detail)[:200]}))
    sys.stdout.flush()


def write(path: str) -> str:
    Path(path).write_text("written from inside the sandbox\n")
    return path


def connect(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
        conn.sendall(b"from inside\n")
        return conn.recv(100).decode()


def main() -> None:
    plan = json.loads(sys.stdin.read())
    for path in plan.get("read", []):
        attempt(f"read {path}", lambda path=path: Path(path).read_text())
    for path in plan.get("write", []):
        attempt(f"write {path}", lambda path=path: write(path))
    for pid in plan.get("signal", []):
        attempt(f"signal {pid}", lambda pid=pid: os.kill(pid, signal.SIGTERM))
    for port in plan.get("connect", []):
        attempt(f"connect {port}", lambda port=port: connect(port))
    for name in plan.get("environ", []):
        attempt(f"environ {name}", lambda name=name: os.environ[name])
    attempt("whoami", lambda: f"uid={os.getuid()} pid={os.getpid()} cwd={Path.cwd()}")


if __name__ == "__main__":
    main()
