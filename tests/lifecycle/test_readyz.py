"""``GET /readyz`` across a SIGTERM (PROTOCOL §17), on a real ``oma-bridge serve``.

It says ``stopping`` from the signal on, before anything closes, and keeps
saying it while a run in flight drains; ``/healthz`` stays ``ok`` until the
process is gone.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidStatus

from oma_bridge.client import connect

from .harness import config_text, daemon_process

pytestmark = pytest.mark.anyio

STOP_GRACE_S = 3.0

# A run that outlasts SIGTERM: only the SIGKILL after the grace ends it, so
# the drain takes about STOP_GRACE_S, long enough to watch /readyz.
IGNORES_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('started', flush=True); time.sleep(60)"
)
STUBBORN = f"""
[agents.stubborn]
kind = "process"
command = "@python"
args = ["-c", "{IGNORES_SIGTERM}"]
"""


async def probe(http: httpx.AsyncClient, url: str) -> tuple[int, str]:
    response = await http.get(url)
    return response.status_code, response.text


async def test_readyz_says_stopping_from_sigterm_while_a_run_drains(folder: Path) -> None:
    server = f'tcp = "127.0.0.1:0"\nstop_grace_s = {STOP_GRACE_S}'
    async with daemon_process(folder, config_text(folder, server, STUBBORN)) as daemon:
        discovery = orjson.loads(daemon.discovery.read_bytes())
        ws_url, token = discovery["url"], discovery["token"]
        base = "http://" + ws_url.removeprefix("ws://")
        outcomes: list[Any] = []
        async with (
            httpx.AsyncClient(timeout=5, trust_env=False) as http,
            connect(discovery_dir=folder) as client,
            anyio.create_task_group() as tg,
        ):
            assert await probe(http, base + "readyz") == (200, "ready")
            agent = await client.open("stubborn")
            started = anyio.Event()

            async def run() -> None:
                try:
                    async for event in agent.stream("x"):
                        if event.type == "text":
                            started.set()
                except Exception as error:  # the daemon closes the connection: expected
                    outcomes.append(type(error).__name__)
                started.set()

            tg.start_soon(run)
            with anyio.fail_after(20):
                await started.wait()
            assert not outcomes, outcomes

            daemon.signal(signal.SIGTERM)
            with anyio.fail_after(1):
                while await probe(http, base + "readyz") != (503, "stopping"):  # noqa: ASYNC110 (a poll of another process)
                    await anyio.sleep(0.02)
            # The flip came before the drain ended: the daemon and its run are still there.
            assert daemon.process.returncode is None
            assert daemon.descendants()
            assert await probe(http, base + "healthz") == (200, "ok")
            with pytest.raises(InvalidStatus) as refused:
                headers = {"Authorization": f"Bearer {token}"}
                async with ws_connect(ws_url, additional_headers=headers, open_timeout=5):
                    pass
            assert refused.value.response.status_code == 503

            with anyio.fail_after(STOP_GRACE_S + 3):
                assert await daemon.process.wait() == 0
            with pytest.raises(httpx.ConnectError):
                await probe(http, base + "readyz")
        assert len(outcomes) == 1
        assert "received SIGTERM; stopping" in daemon.log()
