"""A client that stops reading while a fast stream floods it is dropped, and its run cancelled.

The daemon's ``send_timeout_s`` (1 s here) bounds how long one frame may
wait for the client; past it the connection is aborted, the connection's
runs are cancelled (so the flooding child ends), and nothing of the stream
stays queued in the daemon: its RSS stays flat.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import orjson
import psutil
import pytest
from lifecycle.harness import AGENTS_DIR, config_text, daemon_process, describe
from websockets.asyncio.client import ClientConnection, unix_connect

from oma_bridge.client import connect

pytestmark = pytest.mark.anyio

FLOOD_BYTES = 60_000_000  # under the default max_output_bytes (64 MiB)
PROC_EMIT = AGENTS_DIR / "proc_emit.py"

AGENTS = f"""
[agents.flood]
kind = "process"
command = "{sys.executable}"
args = ["{PROC_EMIT}", "flood", "{FLOOD_BYTES}"]
input = "none"

[agents.small]
kind = "process"
command = "{sys.executable}"
args = ["{PROC_EMIT}", "flood", "2000000"]
input = "none"

[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"
"""


async def call(ws: ClientConnection, ident: int, method: str, params: object) -> object:
    """Send one request and read frames until its answer (this client reads, here)."""
    frame = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
    await ws.send(orjson.dumps(frame).decode())
    while True:
        message = orjson.loads(await ws.recv())
        if message.get("id") == ident:
            assert "result" in message, message
            return message["result"]


def flood_children(daemon_pid: int) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(daemon_pid).children(recursive=True):
        try:
            if "proc_emit.py" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


async def test_a_client_that_stops_reading_is_dropped_and_its_run_cancelled(folder: Path) -> None:
    # The journal keeps up to journal_max_bytes of every stream by design (a
    # bounded replay buffer, docs/sessions.md); a small one here, so that the
    # RSS check below measures what is queued for the stuck client alone.
    server = "send_timeout_s = 1.0\njournal_max_bytes = 1048576"
    text = config_text(folder, server=server, agents=AGENTS)
    async with daemon_process(folder, text) as daemon, connect(discovery_dir=folder) as watcher:
        daemon_ps = psutil.Process(daemon.pid)
        # Warm up the stream path with a reader that keeps up, then take the baseline.
        small = await watcher.open("small")
        warm = small.stream("go")
        async for _ in warm:
            pass
        assert warm.result is not None and warm.result.success
        rss_before = daemon_ps.memory_info().rss

        token = orjson.loads(daemon.discovery.read_bytes())["token"]
        # max_queue=1: the client library stops reading the socket once one frame waits.
        async with unix_connect(
            str(folder / "bridge.sock"),
            "ws://localhost/",
            additional_headers={"Authorization": f"Bearer {token}"},
            max_size=None,
            max_queue=1,
            compression=None,
        ) as ws:
            init = {"protocolVersion": 1, "clientInfo": {"name": "stuck", "version": "0"}}
            await call(ws, 1, "initialize", init)
            opened = await call(ws, 2, "agent/open", {"profile": "flood"})
            agent_id = opened["agentId"]  # type: ignore[index]
            request = {"agentId": agent_id, "input": "go", "runId": "stuck-run"}
            stream = {"jsonrpc": "2.0", "id": 3, "method": "agent/stream", "params": request}
            await ws.send(orjson.dumps(stream).decode())
            # From here on this client reads nothing.
            await daemon.wait_log("stopped reading; dropping it", within=30)

            with anyio.fail_after(10):
                while flood_children(daemon.pid):  # noqa: ASYNC110 (a poll of another process)
                    await anyio.sleep(0.05)
                # The run ends as its connection's tasks are cancelled; the
                # connection itself is counted until its clean-up just after.
                while True:
                    status = await watcher.status()
                    running = any(run["runId"] == "stuck-run" for run in status["runs"])
                    if not running and status["connections"] == 1:
                        break
                    await anyio.sleep(0.05)
            assert status["connections"] == 1, status  # only the watcher is left

        rss_after = daemon_ps.memory_info().rss
        growth_mb = (rss_after - rss_before) / 2**20
        # Had the stream been queued for the stuck client, the daemon would hold ~60 MB.
        assert growth_mb < 16, f"daemon RSS grew {growth_mb:.1f} MB"
        assert flood_children(daemon.pid) == [], describe(flood_children(daemon.pid))
        echo = await watcher.open("echo")
        answer = await echo.run("after the stuck client")
        assert answer.success and "after the stuck client" in answer.output
