"""A daemon that cannot start says why in one line and leaves nothing behind."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from oma_bridge.server.config import parse_config
from oma_bridge.server.daemon import run_daemon
from oma_bridge.server.listeners import StartupError

pytestmark = pytest.mark.anyio


async def test_run_daemon_raises_the_startup_error_itself(folder: Path) -> None:
    (folder / "bridge.sock").write_text("not a socket")
    config = parse_config(
        f'[server]\nsocket = "{folder}/bridge.sock"\n', source="t.toml", base_dir=folder
    )
    with pytest.raises(StartupError, match="exists and is not a socket"):
        await run_daemon(config, state_dir=folder / "state")
    assert not (folder / "bridge.json").exists()


async def test_the_cli_exits_1_with_one_line(folder: Path) -> None:
    (folder / "bridge.sock").write_text("not a socket")
    config = folder / "bridge.toml"
    config.write_text(f'[server]\nsocket = "{folder}/bridge.sock"\n')
    env = {**os.environ, "XDG_STATE_HOME": str(folder / "state")}
    with anyio.fail_after(20):
        done = await anyio.run_process(
            [sys.executable, "-m", "oma_bridge.cli", "serve", "--config", str(config)],
            env=env,
            check=False,
        )
    assert done.returncode == 1
    assert done.stderr.decode().splitlines()[-1] == (
        f"oma-bridge: {folder}/bridge.sock exists and is not a socket; refusing to replace it"
    )
    assert "Traceback" not in done.stderr.decode()
    assert not (folder / "bridge.json").exists()


def test_serve_turns_automatic_collection_off(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # D23: `oma-bridge serve` hands the cyclic collector to a clock before it
    # loads the config; run in-process here (a start-up that fails), put back.
    import gc

    from oma_bridge.cli import main

    (folder / "bridge.sock").write_text("not a socket")
    config = folder / "bridge.toml"
    config.write_text(f'[server]\nsocket = "{folder}/bridge.sock"\n')
    monkeypatch.setenv("XDG_STATE_HOME", str(folder / "state"))
    monkeypatch.setattr("oma_bridge.logs.configure_logging", lambda *_, **__: None)
    assert gc.isenabled()
    try:
        assert main(["serve", "--config", str(config)]) == 1
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.anyio
async def test_the_clock_collects_what_a_cycle_left_while_automatic_collection_is_off() -> None:
    import gc
    import weakref

    from oma_bridge.server.daemon import collect_on_a_clock

    class Node:
        other: Node | None = None

    gc.collect()
    gc.disable()
    try:
        a, b = Node(), Node()
        a.other, b.other = b, a
        left = weakref.ref(a)
        del a, b
        assert left() is not None  # no automatic collection: the cycle waits
        with anyio.move_on_after(0.5):  # some ten collections of the clock
            await collect_on_a_clock(0.05)
        assert left() is None
    finally:
        gc.enable()
