"""A live daemon on a unix socket in a short temporary folder, per test."""

from __future__ import annotations

import logging
import shutil
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from oma_bridge.client import Client, connect
from oma_bridge.server.app import RunningServer
from oma_bridge.server.config import parse_config
from oma_bridge.server.daemon import run_daemon

AGENTS = f"""
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"

[agents.wordcount]
kind = "process"
command = "wc"
args = ["-w"]

[agents.sleeper]
kind = "process"
command = "{sys.executable}"
args = ["-c", "import time; print('started', flush=True); time.sleep(60)"]

[agents.catter]
kind = "process"
command = "cat"
"""


@pytest.fixture
def short_dir() -> Any:
    folder = Path(tempfile.mkdtemp(prefix="omab-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


# The process supervisor is configured once per test process, so its state
# folder must outlive every test.
STATE_DIR = Path(tempfile.mkdtemp(prefix="omab-state-", dir="/tmp"))


@asynccontextmanager
async def daemon(
    folder: Path, server: str = "", agents: str = AGENTS
) -> AsyncIterator[RunningServer]:
    text = f'[server]\nsocket = "{folder}/bridge.sock"\n{server}\n{agents}'
    config = parse_config(text, source="test.toml", base_dir=folder)
    async with anyio.create_task_group() as tg:
        running: RunningServer = await tg.start(
            lambda task_status: run_daemon(
                config, state_dir=folder / "state", task_status=task_status
            )
        )
        try:
            yield running
        finally:
            running.stop()


DaemonFactory = Callable[..., Any]


@pytest.fixture
def client_of(short_dir: Path) -> Callable[..., Any]:
    @asynccontextmanager
    async def make(**options: Any) -> AsyncIterator[Client]:
        async with connect(discovery_dir=short_dir, **options) as client:
            yield client

    return make


def small_send_buffer(session: Any) -> None:
    """Shrink the daemon's send buffers of one connection, so its stream cannot run far ahead.

    The leash holds the reader back; these buffers are what the daemon can
    still write meanwhile (the kernel's ~200 KB would hold ~2,000 entries).
    """
    transport = session._drop.__self__  # noqa: SLF001 — the connection's transport, to shrink its buffers; the connection's drop is its transport's abort
    transport.set_write_buffer_limits(high=4096)
    transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)


def service_of(running: Any) -> Any:
    """The daemon's :class:`AgentService` (its ``agent/watch`` handler's owner), to peek at."""
    return running.gateway.methods.get("agent/watch").__self__


@pytest.fixture
def no_daemon_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """No test that uses this may leave an error (a traceback) in the daemon's log."""
    yield
    errors = [
        record.getMessage()
        for record in caplog.records
        if record.levelno >= logging.ERROR and record.name.startswith("oma_bridge")
    ]
    assert not errors, errors
