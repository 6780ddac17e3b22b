"""A stand-in daemon: starts an ACP agent through the backend, prints its tree, then waits.

Run as ``python -m tests.acp.host_process <agent script> [args...]`` by the
no-orphan test, which SIGKILLs this process and checks the agent's tree dies.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import psutil

from oma_bridge.backends import RunContext
from oma_bridge.backends.acp import AcpBackend, AcpConfig
from oma_bridge.messages import text_message


async def main() -> None:
    config = AcpConfig(command=sys.executable, args=tuple(sys.argv[1:]), cwd=Path.cwd())
    backend = AcpBackend(config, agent_name="hosted")

    async def emit(event: object) -> None:
        pass

    ctx = RunContext("r", "hosted", [text_message("echo hi")], None, emit)
    await backend.run(ctx)
    assert backend.pid is not None
    root = psutil.Process(backend.pid)
    pids = [root.pid, *(child.pid for child in root.children(recursive=True))]
    print(" ".join(map(str, pids)), flush=True)
    await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main)
