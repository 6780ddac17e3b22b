"""The embedded default config's ``demo`` agent, end to end through a live daemon."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from oma_bridge.client import connect
from oma_bridge.server.app import RunningServer
from oma_bridge.server.config import EMBEDDED_SOURCE, load_config
from oma_bridge.server.daemon import run_daemon

pytestmark = pytest.mark.anyio


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Runtime and config folders of our own: no user config, so the embedded default."""
    folder = Path(tempfile.mkdtemp(prefix="omd-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(folder / "config"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def test_demo_agent_of_the_default_config(home: Path) -> None:
    config = load_config()
    assert config.source == EMBEDDED_SOURCE
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            running: RunningServer = await tg.start(
                lambda task_status: run_daemon(
                    config, state_dir=home / "state", task_status=task_status
                )
            )
            try:
                async with connect(discovery_dir=home / "oma-bridge") as client:
                    assert {"name": "demo", "kind": "acp"}.items() <= client.profiles[2].items()
                    agent = await client.open("demo")
                    first = await agent.run("hello from the daemon")
                    assert first.success, first.output
                    assert first.output.startswith("You said: hello from the daemon\n")
                    assert "turn 1 of session demo-1" in first.output
                    stream = agent.stream("and again")
                    events = [event async for event in stream]
                    texts = [e.data for e in events if e.type == "text"]
                    assert len(texts) == 3 and events[-1].type == "done"
                    assert stream.result is not None
                    assert stream.result.output == "".join(texts)
                    assert "turn 2 of session demo-1" in stream.result.output
                    status = await client.status()
                    pids = [p["pid"] for p in status["processes"]]
                    assert [p["agentId"] for p in status["processes"]] == [agent.agent_id]
                    await agent.close()
                    status = await client.status()
                    assert status["processes"] == [] and status["agents"] == []
                    assert pids
            finally:
                running.stop()
