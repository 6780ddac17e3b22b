"""``ulimit -n 64`` on a running daemon: new connections and spawns fail, then recover.

The limit is lowered on the live daemon with ``prlimit(2)`` (psutil), so
start-up is not what is measured: every fd the daemon opens from then on
counts against 64.  Connections are opened until one is not accepted; at
that point a process run and an ACP run (both need pipes) must fail with a
clear message, and the daemon must stay up.  Once the connections close,
a new connection and both runs must work again, and the fd count must
come back to where it was.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import anyio
import orjson
import psutil
import pytest
from lifecycle.harness import config_text, daemon_process
from websockets.asyncio.client import ClientConnection, unix_connect
from websockets.exceptions import InvalidStatus

from oma_bridge.client import DaemonError, DaemonUnavailableError, connect

pytestmark = pytest.mark.anyio

LIMIT = 64

AGENTS = """
[agents.catter]
kind = "process"
command = "cat"

[agents.demo]
kind = "acp"
command = "@python"
args = ["-m", "oma_bridge.demo.acp_agent"]
fs = "none"
permission = "reject"
"""


async def exhaust(
    stack: contextlib.AsyncExitStack, folder: Path, token: str
) -> list[ClientConnection]:
    """Open connections (held by ``stack``) until the daemon accepts no more."""
    held: list[ClientConnection] = []
    for _ in range(2 * LIMIT):
        try:
            ws = await stack.enter_async_context(
                unix_connect(
                    str(folder / "bridge.sock"),
                    "ws://localhost/",
                    additional_headers={"Authorization": f"Bearer {token}"},
                    open_timeout=2,
                )
            )
        except InvalidStatus as refused:
            # The daemon cannot take another connection: it says so at once.
            assert refused.response.status_code == 503
            assert b"out of file descriptors" in refused.response.body
            return held
        held.append(ws)
    raise AssertionError(f"{len(held)} connections and none refused")


async def test_fd_exhaustion_fails_clearly_and_recovers(folder: Path) -> None:
    text = config_text(folder, server="max_connections = 500", agents=AGENTS)
    async with daemon_process(folder, text) as daemon, connect(discovery_dir=folder) as client:
        cat = await client.open("catter")
        assert (await cat.run("before")).output == "before"
        # Opened before the limit: an ACP agent spawns nothing until its first run.
        # (Its first open at the limit is the known failure of the test below.)
        demo = await client.open("demo")
        token = orjson.loads(daemon.discovery.read_bytes())["token"]
        daemon_ps = psutil.Process(daemon.pid)
        fds_before = daemon_ps.num_fds()
        daemon_ps.rlimit(psutil.RLIMIT_NOFILE, (LIMIT, LIMIT))

        async with contextlib.AsyncExitStack() as stack:
            held = await exhaust(stack, folder, token)
            # The 503 reaches the client before the daemon has closed the refused
            # connection and taken its reserve descriptor back: wait for that.
            with anyio.move_on_after(2):
                while daemon_ps.num_fds() != LIMIT:  # noqa: ASYNC110 (a poll of another process)
                    await anyio.sleep(0.01)
            assert daemon_ps.num_fds() == LIMIT
            with pytest.raises(DaemonUnavailableError) as refused:
                async with connect(discovery_dir=folder):
                    pass
            assert str(refused.value).endswith(
                "refused the connection: HTTP 503: "
                "oma-bridge is out of file descriptors; try again shortly"
            )
            assert len(held) >= LIMIT - fds_before - 2

            failed = await cat.run("at the limit")
            assert not failed.success and failed.status.message is not None
            assert failed.status.message == (
                'Process backend "catter" could not start "cat": Too many open files'
            )
            acp_failed = await demo.run("at the limit")
            assert not acp_failed.success and acp_failed.status.message is not None
            assert acp_failed.status.message.startswith('ACP agent "demo" could not be started')
            assert "Too many open files" in acp_failed.status.message
            assert daemon.process.returncode is None
            log = daemon.log()
            assert "out of file descriptors (limit 64): refusing new connections with 503" in log
            assert "socket.accept() out of system resource" not in log  # no traceback per retry

        # The held connections are closed: everything works again.
        with anyio.fail_after(10):
            while daemon_ps.num_fds() > fds_before + 2:  # noqa: ASYNC110 (a poll of another process)
                await anyio.sleep(0.05)
        async with connect(discovery_dir=folder) as again:
            assert (await again.status())["connections"] == 2
        assert (await cat.run("after")).output == "after"
        recovered = await demo.run("hello again")
        assert recovered.success, recovered.status
        assert "hello again" in recovered.output


async def test_first_acp_open_at_the_fd_limit_fails_clearly(folder: Path) -> None:
    text = config_text(folder, server="max_connections = 500", agents=AGENTS)
    async with daemon_process(folder, text) as daemon, connect(discovery_dir=folder) as client:
        token = orjson.loads(daemon.discovery.read_bytes())["token"]
        psutil.Process(daemon.pid).rlimit(psutil.RLIMIT_NOFILE, (LIMIT, LIMIT))
        async with contextlib.AsyncExitStack() as stack:
            await exhaust(stack, folder, token)
            try:
                demo = await client.open("demo")
                result = await demo.run("at the limit")
            except DaemonError as error:
                message = error.message
            else:
                message = result.status.message or ""
            assert "Too many open files" in message
