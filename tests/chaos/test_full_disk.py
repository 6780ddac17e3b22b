"""The daemon's folders on a full 1 MB tmpfs: a clear error at start, no partial files.

Each test mounts its own ``tmpfs`` (size 1 MiB) and fills it.  Mounting
needs root (CAP_SYS_ADMIN); elsewhere these tests are skipped, saying so.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from lifecycle.harness import config_text, daemon_process, wait_all_gone

from oma_bridge.client import connect

pytestmark = pytest.mark.anyio

PAGE = 4096
AGENTS = """
[agents.catter]
kind = "process"
command = "cat"
"""


def fill(folder: Path, *, leave: int = 0) -> None:
    """Fill the file system of ``folder`` to the last byte, then free ``leave`` bytes again."""
    filler = folder / "filler"
    with filler.open("wb") as out:
        block = b"\0" * 65536
        with contextlib.suppress(OSError):
            while True:
                out.write(block)
                out.flush()
    if leave:
        os.truncate(filler, filler.stat().st_size - leave)


@pytest.fixture
def tmpfs(folder: Path) -> Iterator[Path]:
    """A fresh 1 MiB tmpfs mounted at ``folder/full``; unmounted at the end."""
    mount_point = folder / "full"
    mount_point.mkdir()
    command = ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except FileNotFoundError:
        pytest.skip("no mount(8) to mount a 1 MiB tmpfs with")
    if done.returncode != 0:
        pytest.skip(
            f"`{' '.join(command)}` was refused (uid {os.getuid()}, needs CAP_SYS_ADMIN): "
            f"{done.stderr.strip()}"
        )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, check=False)


async def start_failing(config: Path, state_home: Path) -> subprocess.CompletedProcess[bytes]:
    """Run ``oma-bridge serve`` expecting it to stop at start; its exit and output."""
    command = [sys.executable, "-m", "oma_bridge.cli", "serve", "--config", str(config)]
    env = {**os.environ, "XDG_STATE_HOME": str(state_home)}
    with anyio.fail_after(20):
        return await anyio.run_process(command, env=env, check=False)


def leftovers(folder: Path) -> list[str]:
    """What the daemon left in ``folder``; its lock file is kept by design."""
    return sorted(p.name for p in folder.iterdir() if p.name not in ("filler", "bridge.lock"))


async def test_no_room_for_the_discovery_file_is_a_clear_error(folder: Path, tmpfs: Path) -> None:
    # One page left: the lock file takes it; the discovery file finds none.
    fill(tmpfs, leave=PAGE)
    config = folder / "bridge.toml"
    config.write_text(config_text(tmpfs))
    done = await start_failing(config, folder / "state")
    stderr = done.stderr.decode()
    assert done.returncode == 1, stderr
    assert "Traceback" not in stderr, stderr
    expected = f"cannot write the discovery file {tmpfs / 'bridge.json'}: No space left on device"
    assert expected in stderr
    assert leftovers(tmpfs) == []


async def test_a_full_discovery_folder_is_a_clear_error(folder: Path, tmpfs: Path) -> None:
    fill(tmpfs)
    config = folder / "bridge.toml"
    config.write_text(config_text(tmpfs))
    done = await start_failing(config, folder / "state")
    stderr = done.stderr.decode()
    assert done.returncode == 1, stderr
    assert leftovers(tmpfs) == []
    assert "Traceback" not in stderr, stderr
    assert "No space left on device" in stderr


async def test_a_full_state_folder_is_a_clear_error_at_start(folder: Path, tmpfs: Path) -> None:
    (tmpfs / "oma-bridge").mkdir(mode=0o700)  # as a daemon made it
    fill(tmpfs)
    config = folder / "bridge.toml"
    config.write_text(config_text(folder, agents=AGENTS))
    done = await start_failing(config, tmpfs)
    stderr = done.stderr.decode()
    assert done.returncode == 1, stderr
    assert "Traceback" not in stderr, stderr
    expected = f"cannot write to the state folder {tmpfs / 'oma-bridge'}: No space left on device"
    assert expected in stderr
    assert list((tmpfs / "oma-bridge").iterdir()) == []  # not even the probe
    assert not (folder / "bridge.json").exists()


async def test_a_state_folder_filled_later_degrades_and_leaves_no_partial_file(
    folder: Path, tmpfs: Path
) -> None:
    """The watchdog writes its state file at the first spawn, after start-up.

    If the disk filled up in between, the daemon still serves (the watchdog
    guards the children without its crash record), says so in its log, and
    leaves no empty state file behind.
    """
    state_dir = tmpfs / "oma-bridge"
    text = config_text(folder, agents=AGENTS)
    async with daemon_process(folder, text, env={"XDG_STATE_HOME": str(tmpfs)}) as daemon:
        fill(tmpfs)
        async with connect(discovery_dir=folder) as client:
            cat = await client.open("catter")
            for k in range(3):
                result = await cat.run(f"run {k}")
                assert result.success and result.output == f"run {k}", result.status
        await daemon.wait_log("oma-bridge watchdog: no state file: [Errno 28] No space left")
        assert "Traceback" not in daemon.log()
        watchdogs = daemon.descendants()
        daemon.signal(signal.SIGTERM)
        with anyio.fail_after(15):
            await daemon.process.wait()
        assert await wait_all_gone(watchdogs, within=5) == []
    # No partial file: the session of the agent could not be written at all
    # (its folder was made at start, before the disk filled up).
    assert [path.name for path in state_dir.iterdir()] == ["sessions"]
    assert list((state_dir / "sessions").iterdir()) == []
