"""An authenticated connection that never sends ``initialize`` is closed after
``send_timeout_s`` (issue 22): it held one of the ``max_connections`` slots for ever."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from .helpers import call, initialize, make_config, running_daemon

pytestmark = pytest.mark.anyio


async def test_a_connection_that_never_initializes_is_closed_and_frees_its_slot(
    short_dir: Path,
) -> None:
    config = make_config(short_dir, "max_connections = 1\nsend_timeout_s = 0.5")
    async with running_daemon(config) as running:
        assert running.url is not None
        auth = [("Authorization", f"Bearer {running.token}")]
        async with connect(running.url, additional_headers=auth) as silent:
            # Anything but initialize is refused and does not count as one.
            assert (await call(silent, "agents/list"))["error"]["code"] == -32002
            with anyio.fail_after(5), pytest.raises(ConnectionClosed) as closed:
                await silent.recv()
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code == CloseCode.POLICY_VIOLATION
            assert closed.value.rcvd.reason == "no initialize in time"
        # Its slot is free; a connection that initializes stays past the deadline.
        async with connect(running.url, additional_headers=auth) as ws:
            await initialize(ws)
            await anyio.sleep(1.2)
            assert "result" in await call(ws, "agents/list")
