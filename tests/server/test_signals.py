"""SIGTERM stops a real daemon process cleanly (PROTOCOL §11.21)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import anyio
import pytest
from websockets.asyncio.client import unix_connect
from websockets.exceptions import ConnectionClosed

from .helpers import initialize, make_config

pytestmark = pytest.mark.anyio

DAEMON = """
import sys
from functools import partial

import anyio

from oma_bridge.server import load_config, serve


async def main() -> None:
    async with anyio.create_task_group() as tg:
        await tg.start(partial(serve, load_config(sys.argv[1]), handle_signals=True))
        print("ready", flush=True)


anyio.run(main)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_signal_stops_the_daemon_cleanly(short_dir: Path, signum: signal.Signals) -> None:
    make_config(short_dir, tcp=False)  # writes bridge.toml
    process = await anyio.open_process(
        [sys.executable, "-c", DAEMON, str(short_dir / "bridge.toml")]
    )
    try:
        assert process.stdout is not None
        with anyio.fail_after(20):
            assert (await process.stdout.receive()).startswith(b"ready")
        assert (short_dir / "bridge.json").exists()
        async with unix_connect(str(short_dir / "bridge.sock")) as ws:
            await initialize(ws)
            process.send_signal(signum)
            with pytest.raises(ConnectionClosed), anyio.fail_after(10):
                await ws.recv()
        with anyio.fail_after(10):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await process.aclose()
    assert not (short_dir / "bridge.json").exists()
    assert not (short_dir / "bridge.sock").exists()
