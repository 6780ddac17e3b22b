"""PROTOCOL §18.1: the sdist and the wheel carry everything the daemon serves, and the wheel,
installed into a fresh venv outside the checkout, gives a working ``oma-bridge``.

The installed command is run as a user would: ``--version``, ``serve`` on the
built-in config, ``run echo hi``, ``acp demo`` driven by the official Python
SDK (``initialize``, ``session/new``, a prompt), and ``GET /ui`` on its TCP
listener.  How the venv gets its dependencies offline: ``conftest.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from acp_facade.harness import run_sdk_client

from .conftest import ROOT, Built, Venv, fresh_venv, run

#: Files of the package that are not Python modules, which the daemon reads at run time.
SERVED = {
    "oma_bridge/server/ui/index.html",  # GET /ui
    "oma_bridge/acp_registry/data/registry.json",  # registry = "<id>" profiles (§22)
    "oma_bridge/acp_registry/data/registry.schema.json",
    "oma_bridge/acp_registry/data/agent.schema.json",
    "oma_bridge/acp_registry/data/snapshot.json",
    "oma_bridge/acp_registry/data/LICENSE",
    "oma_bridge/demo/acp_agent.py",  # the built-in config's demo agent
    "oma_bridge/wire/protocol.schema.json",  # the wire protocol's JSON Schema
    "oma_bridge/py.typed",
}


def _package_files() -> set[str]:
    """Every file of ``oma_bridge/`` in the checkout, as the wheel names it."""
    return {
        str(path.relative_to(ROOT))
        for path in (ROOT / "oma_bridge").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def test_the_wheel_carries_every_file_of_the_package_and_what_the_daemon_serves(
    built: Built,
) -> None:
    names = built.wheel_names()
    assert names >= SERVED, f"missing from the wheel: {sorted(SERVED - names)}"
    assert _package_files() <= names, f"missing: {sorted(_package_files() - names)}"
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]
    # The same document as docs/schema/ (which scripts/gen_schema.py keeps current).
    with zipfile.ZipFile(built.wheel) as archive:
        shipped = archive.read("oma_bridge/wire/protocol.schema.json")
    assert shipped == (ROOT / "docs" / "schema" / "protocol.schema.json").read_bytes()


def test_the_sdist_builds_that_wheel_and_leaves_the_local_folders_out(built: Built) -> None:
    names = built.sdist_names()
    # The wheel above was built from this sdist: what it needs is in it.
    assert {"pyproject.toml", "README.md", "docs/schema/protocol.schema.json"} <= names
    assert {name for name in SERVED if name != "oma_bridge/wire/protocol.schema.json"} <= names
    leaked = [
        name
        for name in names
        if name.startswith((".venv/", ".git/", "dist/", "build/", "bench/out/"))
        or "__pycache__" in name
        or "_cache/" in name
    ]
    assert not leaked, leaked[:10]


@dataclass
class Home:
    """A user's folders for the installed command: nothing of this machine's daemons."""

    root: Path
    venv: Venv

    @property
    def runtime(self) -> Path:
        return self.root / "run"

    @property
    def home(self) -> Path:
        return self.root / "home"

    def env(self) -> dict[str, str]:
        return {
            "PATH": f"{self.venv.bin}:{os.environ['PATH']}",
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "XDG_RUNTIME_DIR": str(self.runtime),
            "XDG_STATE_HOME": str(self.root / "state"),
            "XDG_CONFIG_HOME": str(self.root / "config"),  # empty: the built-in config
            # The fixed folders (/run/user/$UID, /tmp/oma-bridge-$UID) under here.
            "OMA_BRIDGE_SYSTEM_ROOT": str(self.root / "system"),
        }

    def oma_bridge(self, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv.bin / "oma-bridge"), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            env=self.env(),
            cwd=self.home,
        )


@pytest.fixture(scope="module")
def installed(built: Built) -> Iterator[Home]:
    # Short and outside the checkout: a unix socket path has a length limit.
    root = Path(tempfile.mkdtemp(prefix="omwh-", dir="/tmp"))
    try:
        venv = fresh_venv(root / "venv")
        venv.pip("install", "--no-deps", str(built.wheel))
        for folder in ("home", "run", "state", "config", "system"):
            (root / folder).mkdir(mode=0o700)
        yield Home(root, venv)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def serving(home: Home, *args: str) -> Iterator[dict[str, str]]:
    """``oma-bridge serve`` of the fresh venv, until its discovery file names it; then SIGTERM."""
    log = (home.root / "serve.log").open("wb")
    process = subprocess.Popen(
        [str(home.venv.bin / "oma-bridge"), "serve", *args],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=home.env(),
        cwd=home.home,
        start_new_session=True,
    )
    discovery = home.runtime / "oma-bridge" / "bridge.json"
    try:
        deadline = time.monotonic() + 30
        found: dict[str, str] = {}
        while not found:
            assert process.poll() is None, (home.root / "serve.log").read_text()
            assert time.monotonic() < deadline, "no discovery file within 30 s"
            with contextlib.suppress(OSError, ValueError):
                found = json.loads(discovery.read_text())
            time.sleep(0.05)
        yield found
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0, (home.root / "serve.log").read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        log.close()


def test_the_installed_command_serves_runs_and_speaks_acp(installed: Home) -> None:
    version = installed.oma_bridge("--version")
    assert version.returncode == 0 and version.stdout.startswith("oma-bridge "), version
    where = run(
        [str(installed.venv.python), "-c", "import oma_bridge; print(oma_bridge.__file__)"],
        cwd=installed.home,
    )
    # The installed package, not the checkout's.
    assert where.stdout.strip().startswith(str(installed.venv.site_packages()))

    # The built-in config: the unix socket and loopback TCP 47683 or the next free port.
    with serving(installed) as discovery:
        assert discovery["url"].startswith("ws://127.0.0.1:")
        hi = installed.oma_bridge("run", "echo", "hi")
        assert (hi.returncode, hi.stdout, hi.stderr) == (0, "hi\n", "")
        words = installed.oma_bridge("run", "wordcount", "-", stdin="one two three\n")
        assert (words.returncode, words.stdout.strip()) == (0, "3")

        script = {
            "command": [str(installed.venv.bin / "oma-bridge"), "acp", "demo"],
            "env": installed.env(),
            "trim": True,  # what spawn_agent_process keeps, plus the env above
            "cwd": str(installed.home),
            "steps": [
                {"op": "initialize"},
                {"op": "new", "cwd": str(installed.home)},
                {"op": "prompt", "text": "hi"},
            ],
        }
        acp = run_sdk_client(script, os.environ)
        responses = [line for line in acp.lines if line["type"] == "response"]
        assert [r["op"] for r in responses] == ["initialize", "new", "prompt"], acp
        assert all("result" in r for r in responses), acp
        assert responses[0]["result"]["protocolVersion"] == 1
        assert responses[2]["result"]["stopReason"] == "end_turn"
        # The shim found the daemon started above: it started none of its own.
        shim_said = " ".join(line["text"] for line in acp.of("agent_stderr"))
        assert "started" not in shim_said, shim_said

        link = installed.oma_bridge("ui", "--no-browser")
        assert link.returncode == 0 and link.stdout.startswith("http://127.0.0.1:"), link
        page = httpx.get(link.stdout.strip(), timeout=10)
        assert page.status_code == 200 and "<main" in page.text
        assert "oma-bridge" in page.text


def test_the_systemd_unit_starts_the_command_where_pipx_puts_it(installed: Home) -> None:
    """``ExecStart=%h/.local/bin/oma-bridge``: pipx's default ``PIPX_BIN_DIR``, a symlink
    into the app's venv, made here as pipx makes it; ``systemd-analyze verify`` checks
    the unit finds an executable there (and fails without one)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is needed to verify the unit")
    unit = installed.root / "oma-bridge.service"
    shutil.copy(ROOT / "systemd" / "oma-bridge.service", unit)
    exec_start = [line for line in unit.read_text().splitlines() if line.startswith("ExecStart=")]
    assert exec_start == ["ExecStart=%h/.local/bin/oma-bridge serve"]
    env = {**installed.env(), "SYSTEMD_LOG_LEVEL": "err"}

    def verify() -> subprocess.CompletedProcess[str]:
        argv = [analyze, "verify", "--user", str(unit)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)

    missing = verify()
    assert missing.returncode != 0 and "is not executable" in missing.stderr, missing
    bin_dir = installed.home / ".local" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "oma-bridge").symlink_to(installed.venv.bin / "oma-bridge")
    try:
        found = verify()
        assert found.returncode == 0, found.stderr
        version = subprocess.run(
            [str(bin_dir / "oma-bridge"), "--version"], capture_output=True, text=True, env=env
        )
        assert version.stdout.startswith("oma-bridge "), version
    finally:
        (bin_dir / "oma-bridge").unlink()


def test_pip_install_of_a_source_folder_works_too(built: Built, tmp_path: Path) -> None:
    """``pip install PATH`` (and so ``pipx install PATH``): the unpacked sdist as the path."""
    with tarfile.open(built.sdist) as archive:
        archive.extractall(tmp_path / "src", filter="data")
    [source] = (tmp_path / "src").iterdir()
    venv = fresh_venv(tmp_path / "venv")
    # Offline, the build backend is the test venv's hatchling (a user's pip fetches it).
    venv.pip("install", "--no-deps", "--no-build-isolation", str(source))
    check = (
        "import importlib.resources as r; "
        "print(r.files('oma_bridge.server.ui').joinpath('index.html').is_file(), "
        "r.files('oma_bridge.wire').joinpath('protocol.schema.json').is_file())"
    )
    done = run([str(venv.python), "-c", check], cwd=tmp_path)
    assert done.stdout.split() == ["True", "True"]
    assert run([str(venv.bin / "oma-bridge"), "--version"], cwd=tmp_path).stdout.startswith(
        "oma-bridge "
    )
