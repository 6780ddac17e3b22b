"""The facade in a daemon run in this process, for what only a patched library can provoke."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import unix_connect

from oma_bridge.agent import Agent
from oma_bridge.server.config import parse_config
from oma_bridge.server.daemon import run_daemon

from .harness import RawClient, text

pytestmark = pytest.mark.anyio


@pytest.fixture
async def socket_path() -> AsyncIterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="omai-", dir="/tmp"))
    config = parse_config(
        f'[server]\nsocket = "{folder}/bridge.sock"\npersist_sessions = false\n'
        '[agents.echo]\nkind = "llm"\nprovider = "echo"\nmodel = "echo-1"\n',
        source="test.toml",
        base_dir=folder,
    )
    try:
        async with anyio.create_task_group() as group:
            running = await group.start(
                lambda task_status: run_daemon(
                    config, state_dir=folder / "state", task_status=task_status
                )
            )
            try:
                yield folder / "bridge.sock"
            finally:
                running.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def echo_client(path: Path) -> RawClient:
    ws = await unix_connect(str(path), "ws://localhost/acp/echo")
    client = RawClient(ws)
    await client.initialize()
    return client


async def test_a_turn_that_raises_is_an_internal_error_not_the_daemons_end(
    socket_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def boom(self: Agent, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug deep in the agent layer")

    with anyio.fail_after(20):
        victim = await echo_client(socket_path)
        session_id = await victim.new("/tmp")
        with monkeypatch.context() as patch:
            patch.setattr(Agent, "prompt", boom)
            answer = await victim.prompt(session_id, text("hello"))
        assert answer["error"] == {
            "code": -32603,
            "message": "Internal error",
            "data": {"details": "Internal error"},
        }
        assert "deep in the agent" not in json.dumps(answer)
        # The daemon lives on: the same session, and a new connection, still work.
        again = await victim.prompt(session_id, text("hello again"))
        assert again["result"] == {"stopReason": "end_turn"}
        other = await echo_client(socket_path)
        fresh = await other.new("/tmp")
        assert (await other.prompt(fresh, text("hi")))["result"] == {"stopReason": "end_turn"}
        await victim.close()
        await other.close()
