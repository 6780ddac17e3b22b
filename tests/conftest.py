"""Shared fixtures.  Tests run on asyncio through the anyio pytest plugin."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import tempfile
import threading
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import npm_peers
from support.acpx import clean_acpx_home

from oma_bridge.certificates import init_tls, make_key

# PROTOCOL §18.2 looks for a daemon in /run/user/$UID and /tmp/oma-bridge-$UID after
# $XDG_RUNTIME_DIR: the machine's own are not the tests'.  Every test, and every process
# it starts, takes those fixed folders under a private folder of the run instead
# (OMA_BRIDGE_SYSTEM_ROOT, docs/client.md); the process that made it removes it.
if "OMA_BRIDGE_SYSTEM_ROOT" not in os.environ:
    _SYSTEM_ROOT = tempfile.mkdtemp(prefix="omab-root-", dir="/tmp")
    os.environ["OMA_BRIDGE_SYSTEM_ROOT"] = _SYSTEM_ROOT
else:
    _SYSTEM_ROOT = ""


def pytest_sessionfinish() -> None:
    if _SYSTEM_ROOT:
        shutil.rmtree(_SYSTEM_ROOT, ignore_errors=True)


@pytest.fixture
def no_collector() -> Iterator[None]:
    """The cyclic collector off: what the test leaves must go by reference counting alone."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture
def popen_threads(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[threading.Thread]]:
    """The thread of every ``subprocess.Popen`` from now on, by its command's file name.

    By name, since a supervisor's first spawn also starts its crash watchdog.
    """
    threads: dict[str, list[threading.Thread]] = defaultdict(list)
    real_popen = subprocess.Popen

    def recording_popen(argv: Sequence[str], **kwargs: object) -> subprocess.Popen[bytes]:
        threads[os.path.basename(argv[0])].append(threading.current_thread())  # noqa: PTH119
        return real_popen(argv, **kwargs)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    return threads


@pytest.fixture
def anyio_backend() -> str | tuple[str, dict[str, bool]]:
    # OMA_BRIDGE_TEST_LOOP=uvloop runs the in-process tests on uvloop, as
    # `[server] event_loop = "auto"` runs the daemon where it is installed.
    if os.environ.get("OMA_BRIDGE_TEST_LOOP") == "uvloop":
        return ("asyncio", {"use_uvloop": True})
    return "asyncio"


@pytest.fixture(scope="session")
def acp_ts_sdk() -> Path:
    """A folder whose ``node_modules`` holds ``@agentclientprotocol/sdk`` 2.4.0 (else skip)."""
    return npm_peers.ts_sdk_dir()


@pytest.fixture(scope="session")
def acpx() -> list[str]:
    """The command (``[node, cli.js]``) of the pinned ``acpx`` CLI (else skip)."""
    return npm_peers.acpx_command()


@pytest.fixture
def acpx_home(tmp_path: Path) -> Iterator[Path]:
    """A private HOME for acpx (its state is ``$HOME/.acpx``); cleans what acpx left behind."""
    home = tmp_path / "home"
    home.mkdir()
    yield home
    clean_acpx_home(home)


@dataclass(frozen=True)
class TlsFiles:
    """A test CA and a server certificate it signed for ``localhost``, ``127.0.0.1``, ``::1``.

    Made once per test run in a temporary folder (never committed); the keys are 0600.
    """

    ca: Path
    cert: Path
    key: Path
    #: A key of no certificate here: a mismatched pair.
    other_key: Path

    def server_toml(self) -> str:
        """The ``[server]`` lines that turn TLS on with this pair."""
        return f'tls_cert = "{self.cert}"\ntls_key = "{self.key}"\n'


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    # The same code as `oma-bridge tls init` (oma_bridge/certificates.py).
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls") / "tls"
    made = init_tls(folder, ca_name="oma-bridge test CA", ca_days=2, server_days=2)
    return TlsFiles(
        ca=made.ca, cert=made.cert, key=made.key, other_key=make_key(folder / "other.key")
    )
