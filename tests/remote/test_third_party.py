"""A remote profile pointed at a server that is not oma-bridge: the official Python SDK's
agent, served with the SDK's own WebSocket transport (``acp.ws``) under uvicorn, over TLS.

The same client core as for B; only what the server does differs: it takes no
token (the Bearer header A sends is ignored), selects no subprotocol, and
forgets a session with its connection, so after it restarts A starts a new
session and its journal says so (PROTOCOL §13.4).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from oma_bridge.client import connect

from .harness import local_daemon, remote_profile, token_file

if TYPE_CHECKING:
    from conftest import TlsFiles

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).resolve().parent.parent / "agents" / "acp_sdk_ws_agent.py"


class SdkServer:
    """The SDK's echo agent under uvicorn, in a process group of its own (killed by ``stop``)."""

    def __init__(self, tls: TlsFiles) -> None:
        self.tls = tls
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> int:
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER), str(self.tls.cert), str(self.tls.key), str(self.port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        assert self.process.stdout is not None and self.process.stderr is not None
        line = self.process.stdout.readline()
        if not line:
            raise AssertionError(f"the SDK server did not start: {self.process.stderr.read()!r}")
        self.port = int(line)
        return self.port

    def stop(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
            self.process = None


@pytest.fixture
def server(tls_files: TlsFiles) -> Iterator[SdkServer]:
    running = SdkServer(tls_files)
    try:
        yield running
    finally:
        running.stop()


async def test_the_sdk_s_own_websocket_server(
    tmp_path: Path, tls_files: TlsFiles, server: SdkServer
) -> None:
    url = f"wss://127.0.0.1:{server.start()}/acp/echo"
    agents = remote_profile(
        "third", url, token=token_file(tmp_path), ca=tls_files.ca, remote_cwd=None
    )
    with local_daemon(tmp_path / "a", agents) as a:
        async with connect(socket=a.discovery()["socket"]) as client:
            agent = await client.open("third")
            first = await agent.run("hello sdk")
            assert first.success, first
            assert first.output == "echo 1: hello sdk"
            second = await agent.run("again")
            assert second.output == "echo 2: again"  # one session across runs

            # The server goes away and comes back on the same port.  The server forgot
            # the session, so a new one starts, and A's log and journal say that the
            # earlier turns are lost.
            server.stop()
            server.start()
            lost = await agent.run("still there?")
            if not lost.success:
                # The end of the old connection had not reached A yet: the run that
                # found it failed, saying so, and the next one connects again.
                assert "lost its connection" in str(lost.status.message), lost.status
                lost = await agent.run("still there?")
            assert lost.success, lost
            assert lost.output == "echo 1: still there?"
        assert "could not be continued" in a.log()
