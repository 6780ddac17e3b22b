"""Shared fixtures.  Tests run on asyncio through the anyio pytest plugin."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import npm_peers
from support.acpx import clean_acpx_home

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
def anyio_backend() -> str:
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
    """A test CA and a server certificate it signed for ``127.0.0.1`` and ``localhost``.

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


_SERVER_EXTENSIONS = """\
subjectAltName = IP:127.0.0.1, DNS:localhost
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
"""


def _openssl(folder: Path, command: str, *args: str) -> None:
    """``openssl`` with the words of ``command``, then ``args`` (which may hold spaces)."""
    argv = ["openssl", *command.split(), *args]
    subprocess.run(argv, cwd=folder, check=True, capture_output=True, timeout=30)


def _new_key(folder: Path, name: str) -> Path:
    _openssl(folder, f"genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out {name}")
    path = folder / name
    path.chmod(0o600)
    return path


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    _new_key(folder, "ca.key")
    _openssl(
        folder,
        "req -x509 -new -key ca.key -out ca.pem -days 2",
        *("-subj", "/CN=oma-bridge test CA"),
        *("-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
    )
    key = _new_key(folder, "server.key")
    (folder / "server.ext").write_text(_SERVER_EXTENSIONS)
    _openssl(folder, "req -new -key server.key -out server.csr -subj /CN=127.0.0.1")
    _openssl(
        folder,
        "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial"
        " -out server.pem -days 2 -extfile server.ext",
    )
    return TlsFiles(
        ca=folder / "ca.pem",
        cert=folder / "server.pem",
        key=key,
        other_key=_new_key(folder, "other.key"),
    )
