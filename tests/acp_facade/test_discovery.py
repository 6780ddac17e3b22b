"""The shim in an SDK's trimmed environment finds the user's daemon (PROTOCOL §18.2).

The official Python SDK's ``spawn_agent_process`` keeps only HOME, LOGNAME,
PATH, SHELL, TERM and USER: no ``XDG_RUNTIME_DIR``.  The daemon here lives
where a systemd user daemon does, under ``/run/user/$UID`` — a folder the
test makes under ``$OMA_BRIDGE_SYSTEM_ROOT``, the variable the lookup takes
the fixed folders under (docs/client.md), passed to the shim on top of what
the SDK keeps, as an editor's agent setting can.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from .harness import OMA_BRIDGE, run_sdk_client, stop_process_tree, wait_for_discovery

UID = os.getuid()
HELLO = [{"op": "initialize"}, {"op": "new"}, {"op": "prompt", "text": "hello there"}]


@dataclass
class Machine:
    """A private ``/`` for the fixed folders, a HOME, and the SDK's extra variables."""

    root: Path
    home: Path

    @property
    def run_user(self) -> Path:
        return self.root / "run" / "user" / str(UID)

    @property
    def tmp_folder(self) -> Path:
        return self.root / "tmp" / f"oma-bridge-{UID}"

    @property
    def extra_env(self) -> dict[str, str]:
        """What the SDK is given on top of the six variables it keeps."""
        return {"OMA_BRIDGE_SYSTEM_ROOT": str(self.root), "HOME": str(self.home)}


@pytest.fixture
def machine() -> Iterator[Machine]:
    root = Path(tempfile.mkdtemp(prefix="omad-", dir="/tmp"))  # short: socket paths
    home = root / "home"
    home.mkdir()
    run_user = root / "run" / "user" / str(UID)
    run_user.mkdir(parents=True)
    run_user.chmod(0o700)  # what systemd-logind makes
    try:
        yield Machine(root, home)
    finally:
        for folder in (run_user / "oma-bridge", root / "tmp" / f"oma-bridge-{UID}"):
            _kill_daemon_of(folder)
        shutil.rmtree(root, ignore_errors=True)


def _kill_daemon_of(folder: Path) -> None:
    with contextlib.suppress(OSError, ValueError, KeyError, psutil.Error):
        daemon = psutil.Process(int(json.loads((folder / "bridge.json").read_text())["pid"]))
        if "serve" in daemon.cmdline():
            for process in [daemon, *daemon.children(recursive=True)]:
                process.kill()


def sdk_script(machine: Machine) -> dict[str, object]:
    return {
        "command": [OMA_BRIDGE, "acp", "echo"],
        "trim": True,  # the SDK's own environment, not the test's
        "env": machine.extra_env,
        "cwd": str(machine.home),
        "steps": HELLO,
    }


def test_the_sdk_started_shim_finds_the_daemon_under_run_user(machine: Machine) -> None:
    folder = machine.run_user / "oma-bridge"
    config = machine.root / "bridge.toml"
    config.write_text(
        f'[server]\nsocket = "{folder}/bridge.sock"\nworkspace_roots = ["{machine.root}"]\n'
        '[agents.echo]\nkind = "llm"\nprovider = "echo"\nmodel = "echo-1"\n'
    )
    env = {**os.environ, **machine.extra_env, "XDG_STATE_HOME": str(machine.root / "state")}
    env.pop("XDG_RUNTIME_DIR", None)
    with (machine.root / "daemon.log").open("wb") as log:
        daemon = subprocess.Popen(
            [OMA_BRIDGE, "serve", "--config", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
        )
    try:
        wait_for_discovery(machine.run_user, daemon.pid)
        run = run_sdk_client(sdk_script(machine), dict(os.environ))
        assert run.result("prompt")["stopReason"] == "end_turn", run.stderr
        assert "".join(run.chunks()) == "hello there"
        stderr = run.of("agent_stderr")[0]["text"]
        assert "starting" not in stderr and "started" not in stderr, stderr
        assert not (machine.tmp_folder / "bridge.json").exists()  # no second daemon
        # The command line's lookup is the same one: trimmed alike, it finds the daemon too.
        trimmed = {"PATH": os.environ["PATH"], **machine.extra_env}
        agents = subprocess.run(
            [OMA_BRIDGE, "agents"], env=trimmed, capture_output=True, text=True, timeout=30
        )
        assert agents.returncode == 0, agents.stderr
        assert agents.stdout.split()[4:6] == ["echo", "llm"]
    finally:
        stop_process_tree(daemon, [])


def test_a_stale_file_is_passed_over_and_the_started_daemon_is_named(machine: Machine) -> None:
    folder = machine.run_user / "oma-bridge"
    folder.mkdir(mode=0o700)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = {"pid": gone.pid, "version": "0", "protocolVersion": 1, "socket": None}
    (folder / "bridge.json").write_text(json.dumps({**stale, "url": None, "token": "t"}))
    run = run_sdk_client(sdk_script(machine), dict(os.environ))
    assert run.result("prompt")["stopReason"] == "end_turn", run.stderr
    assert "".join(run.chunks()) == "hello there"
    lines = run.of("agent_stderr")[0]["text"].splitlines()
    [looked] = [line for line in lines if "starting one" in line]
    assert f"names pid {gone.pid}, which is gone" in looked
    [started] = [line for line in lines if "started a daemon" in line]
    found = json.loads((machine.tmp_folder / "bridge.json").read_text())
    pid = int(found["pid"])
    # HOME has no config of its own: the built-in one.
    where = f"(pid {pid}, the built-in config, discovery file {machine.tmp_folder}/bridge.json;"
    assert where in started
    assert psutil.Process(pid).is_running()
    os.kill(pid, signal.SIGTERM)
    _, alive = psutil.wait_procs([psutil.Process(pid)], timeout=15)
    assert not alive
