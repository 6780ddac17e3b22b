"""The lookup of PROTOCOL §18.2 (``oma_bridge.client.discovery``): its order, what it skips."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from daemon.conftest import daemon, short_dir

from oma_bridge.client import DaemonNotRunningError, connect, find_daemon
from oma_bridge.client.discovery import (
    discovery_folders,
    find_daemons,
    read_discovery,
    url_from_environment,
)
from oma_bridge.paths import SYSTEM_ROOT_VARIABLE, default_runtime_dir

__all__ = ["short_dir"]

UID = os.getuid()


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private ``/``-alike for the fixed folders, and no ``XDG_RUNTIME_DIR``."""
    monkeypatch.setenv(SYSTEM_ROOT_VARIABLE, str(tmp_path))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("OMA_BRIDGE_URL", raising=False)
    return tmp_path


def user_runtime(root: Path, mode: int = 0o700) -> Path:
    folder = root / "run" / "user" / str(UID)
    folder.mkdir(parents=True)
    folder.chmod(mode)
    return folder


def write(folder: Path, pid: int, socket: str = "/nowhere.sock", url: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "bridge.json"
    content = {"pid": pid, "version": "0", "protocolVersion": 1, "socket": socket, "url": url}
    path.write_text(json.dumps({**content, "token": "t"}))
    return path


def gone_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_the_order_is_xdg_then_run_user_then_tmp(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_user = user_runtime(root)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(root / "xdg"))
    folders, passed_over = discovery_folders()
    assert folders == [
        root / "xdg" / "oma-bridge",
        run_user / "oma-bridge",
        root / "tmp" / f"oma-bridge-{UID}",
    ]
    assert passed_over == []
    # The usual case: XDG_RUNTIME_DIR is /run/user/$UID, looked at once.
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run_user))
    assert discovery_folders()[0] == [run_user / "oma-bridge", root / "tmp" / f"oma-bridge-{UID}"]
    # Without XDG_RUNTIME_DIR the daemon's own folder is the last one looked at.
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert default_runtime_dir() == discovery_folders()[0][-1]


def test_a_run_user_folder_that_is_not_private_is_passed_over_and_said(root: Path) -> None:
    assert discovery_folders() == ([root / "tmp" / f"oma-bridge-{UID}"], [])  # none: no word
    run_user = user_runtime(root, 0o755)
    write(run_user / "oma-bridge", os.getpid())
    folders, passed_over = discovery_folders()
    assert folders == [root / "tmp" / f"oma-bridge-{UID}"]
    assert passed_over == [f"{run_user} is mode 0755, not 0700"]
    with pytest.raises(DaemonNotRunningError) as error:
        find_daemon()
    assert f"{run_user} is mode 0755, not 0700" in str(error.value)


def test_a_stale_file_is_not_a_daemon_and_the_next_live_one_is(root: Path) -> None:
    run_user = user_runtime(root)
    stale = write(run_user / "oma-bridge", gone_pid())
    live = write(root / "tmp" / f"oma-bridge-{UID}", os.getpid(), url="ws://127.0.0.1:47683/")
    found, reasons = find_daemons()
    assert [d.path for d in found] == [live]
    assert found[0].url == "ws://127.0.0.1:47683/"  # the TCP URL it recorded, handed out
    assert reasons == [f"the discovery file {stale} names pid {read_pid(stale)}, which is gone"]
    assert find_daemon().path == live


def test_none_anywhere_names_every_place_looked_at(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(root / "xdg"))
    run_user = user_runtime(root)
    (run_user / "oma-bridge").mkdir()
    (run_user / "oma-bridge" / "bridge.json").write_text("{not json")
    with pytest.raises(DaemonNotRunningError) as error:
        find_daemon()
    message = str(error.value)
    assert message.startswith("no oma-bridge daemon is running (no discovery file at ")
    assert str(root / "xdg" / "oma-bridge" / "bridge.json") in message
    assert f"cannot read the discovery file {run_user / 'oma-bridge' / 'bridge.json'}" in message
    assert str(root / "tmp" / f"oma-bridge-{UID}" / "bridge.json") in message
    assert message.endswith("; start one with `oma-bridge serve`")
    assert len(error.value.reasons) == 3


def test_a_named_folder_is_the_only_one(root: Path) -> None:
    write(root / "tmp" / f"oma-bridge-{UID}", os.getpid())
    with pytest.raises(DaemonNotRunningError, match="no discovery file at"):
        find_daemon(root / "elsewhere")
    malformed = write(root / "bad", os.getpid())
    malformed.write_text(json.dumps({"pid": "x"}))
    with pytest.raises(DaemonNotRunningError, match="is malformed"):
        read_discovery(root / "bad")


def test_the_url_comes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMA_BRIDGE_URL", raising=False)
    assert url_from_environment() is None
    monkeypatch.setenv("OMA_BRIDGE_URL", "ws://127.0.0.1:1/")
    assert url_from_environment() == "ws://127.0.0.1:1/"
    assert url_from_environment("wss://given/") == "wss://given/"


def read_pid(path: Path) -> int:
    return int(json.loads(path.read_text())["pid"])


@pytest.mark.anyio
async def test_connect_takes_its_url_from_the_environment(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with daemon(short_dir, server='tcp = "127.0.0.1:0"'):
        found = find_daemon(short_dir)
        assert found.url is not None and found.socket is not None
        monkeypatch.setenv("OMA_BRIDGE_URL", found.url)
        monkeypatch.setenv(SYSTEM_ROOT_VARIABLE, str(short_dir / "nothing-here"))
        monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
        async with connect(token=found.token) as client:
            assert client.connect_options["url"] == found.url  # not a discovery file's socket
            assert (await (await client.open("echo")).run("hi")).output == "hi"
