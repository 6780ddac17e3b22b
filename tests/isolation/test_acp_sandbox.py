"""A sandboxed ACP agent on the official TypeScript SDK, end to end through the facade.

The daemon runs as a subprocess with one acp profile under ``sandbox =
"bwrap"``, ``network = false``: node from the system, the agent script and
the SDK from ``sandbox_read`` (the SDK sits in the npm cache of the home
folder, which is otherwise empty inside).  The TypeScript client talks to
``/acp/coder``: the agent reads its own folder but not a file planted
beside it, its terminal command runs in the same sandbox (its own pid 1,
the planted file absent, ``/usr`` read-only), and a SIGKILL of the daemon
leaves none of the sandbox's processes behind.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
from pathlib import Path

import anyio
import pytest
from lifecycle.harness import AGENTS_DIR, config_text, daemon_process, describe, wait_all_gone
from support.npm_peers import require_node
from support.ts_client import run_ts_client

from oma_bridge.client import connect
from oma_bridge.supervision.sandbox import SYSTEM_PATHS

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("require_bwrap")]

TS_AGENT = AGENTS_DIR / "acp_ts_agent.mjs"


def profile(node: str, sdk: Path, project: Path) -> str:
    reads = [str(AGENTS_DIR), str(sdk)]
    prefix = Path(os.path.realpath(node)).parent.parent  # a node of nvm's, say, in the home
    if not any(str(prefix).startswith(path) for path in SYSTEM_PATHS):
        reads.append(str(prefix))
    listed = ", ".join(f'"{path}"' for path in reads)
    return f"""
[agents.coder]
kind = "acp"
command = "{node}"
args = ["{TS_AGENT}"]
env = {{ OMA_ACP_TS_SDK_DIR = "{sdk}" }}
cwd = "{project}"
terminal = true
permission = "auto-approve"
sandbox = "bwrap"
network = false
sandbox_read = [{listed}]
"""


async def test_a_sandboxed_ts_agent_through_the_facade(acp_ts_sdk: Path, folder: Path) -> None:
    node = require_node()
    project = folder / "project"
    project.mkdir()
    (project / "mine.txt").write_text("mine")
    planted = folder / f"planted-{secrets.token_hex(4)}.txt"
    planted.write_text("outside")
    text = config_text(folder, 'tcp = "127.0.0.1:0"', profile(node, acp_ts_sdk, project))
    async with daemon_process(folder, text) as daemon:
        discovery = json.loads(daemon.discovery.read_text())
        url = str(discovery["url"]).rstrip("/")
        terminal = (
            f"cat {planted} || echo no-planted; cat /proc/1/comm; echo inside > made.txt; "
            "touch /usr/oma-x || echo usr-read-only"
        )
        script = {
            "url": f"{url}/acp/coder",
            "token": discovery["token"],
            "protocols": ["acp.v1"],
            "cwd": str(project),
            "steps": [
                {"op": "initialize"},
                {"op": "new"},
                {"op": "prompt", "text": f"peek {project / 'mine.txt'}"},
                {"op": "prompt", "text": f"peek {planted}"},
                {"op": "prompt", "text": f"terminal {terminal}"},
            ],
        }
        run = await run_ts_client(script, timeout_s=60)
        assert run.ok, run.describe()
        meta = run.result("initialize")["_meta"]
        assert meta == {"oma-bridge/sandbox": {"kind": "bwrap", "network": False}}
        said = "".join(run.chunks())
        assert "peek:ok:mine" in said and "peek:ENOENT" in said, said
        assert "exit:0" in said and "no-planted" in said and "usr-read-only" in said, said
        assert "\nbwrap\n" in said, said  # the terminal's pid 1 is its own sandbox's
        assert (project / "made.txt").read_text() == "inside\n"
        assert not await anyio.Path("/usr/oma-x").exists()

        # The agent lives on in the daemon (the client only detached): SIGKILL it.
        async with connect(discovery_dir=folder) as client:
            status = await client.status()
        pids = {entry["pid"] for entry in status["processes"]}
        assert len(pids) >= 3, status  # bwrap's launcher and init, node
        sandboxed = [p for p in daemon.descendants() if p.pid in pids]
        assert len(sandboxed) == len(pids), describe(daemon.descendants())
        daemon.signal(signal.SIGKILL)
        await daemon.process.wait()
        survivors = await wait_all_gone(sandboxed, within=5)
        assert survivors == [], describe(survivors)
