"""A storm of clients connecting at once is accepted whole (PROTOCOL §23: new connections
accepted throughout).

With asyncio's default listen backlog (100), the 101st of a burst of
connects to the unix socket found the queue full and its client read an
end of file in place of the handshake's answer ("did not receive a valid
HTTP response"): 65 of the load benchmark's 220 clients were lost that way
(docs/benchmarks.md, "Load").  The listeners now ask for a backlog the
kernel caps at ``net.core.somaxconn`` (``listeners.LISTEN_BACKLOG``).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from websockets.asyncio.client import connect, unix_connect

from .helpers import initialize, make_config, running_daemon

pytestmark = pytest.mark.anyio

STORM = 300


@pytest.mark.parametrize("via", ["unix", "tcp"])
async def test_three_hundred_clients_connecting_at_once_all_get_in(
    short_dir: Path, via: str
) -> None:
    config = make_config(short_dir, f"max_connections = {STORM + 8}", tcp=via == "tcp")
    initialized = 0
    async with running_daemon(config) as running:

        async def one(release: anyio.Event) -> None:
            nonlocal initialized
            if via == "unix":
                opened = unix_connect(str(running.socket_path), open_timeout=30)
            else:
                opened = connect(
                    f"ws://127.0.0.1:{running.port}/",
                    additional_headers={"Authorization": f"Bearer {running.token}"},
                    open_timeout=30,
                )
            async with opened as ws:
                await initialize(ws)
                initialized += 1
                if initialized == STORM:
                    everyone.set()
                await release.wait()  # every one of them open at once

        release, everyone = anyio.Event(), anyio.Event()
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for _ in range(STORM):
                    tg.start_soon(one, release)
                await everyone.wait()
                release.set()
    assert initialized == STORM
