"""Pinned npm packages for tests that need real third-party ACP peers.

Each package is installed once into its own folder of a cache,
``~/.cache/oma-bridge/npm/<name>-<version>/`` (``$OMA_NPM_CACHE`` overrides the
cache folder), by ``npm install --prefix <folder> ... <name>@<version>``. A
file lock keeps parallel sessions from installing the same folder at once,
and a marker file, written only after npm succeeded and the package is
there at the pinned version, tells later sessions it is ready. The first run
on a fresh machine therefore needs the npm registry; later runs need nothing.

When node or npm is missing, or the install fails or times out, the test that
asked is *skipped* with the command and the error's last line: these peers
are extra evidence, never a reason for ``make test`` to fail on a machine
without them.

Use :func:`require_package` (skips) or :func:`install_package` (raises
:class:`NpmUnavailable`); :func:`ts_sdk_dir` and :func:`acpx_command` are the
two peers the tests use. The fixtures in ``tests/conftest.py`` wrap them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = [
    "ACPX",
    "ACP_TS_SDK",
    "CLAUDE_AGENT_ACP",
    "CODEX_ACP",
    "INSTALL_TIMEOUT_S",
    "WS",
    "NpmPackage",
    "NpmUnavailable",
    "acpx_command",
    "cache_root",
    "install_package",
    "package_dir",
    "require_node",
    "require_package",
    "ts_sdk_dir",
]

INSTALL_TIMEOUT_S = 300.0
MARKER = ".oma-bridge-installed"


@dataclass(frozen=True)
class NpmPackage:
    """One pinned npm package: ``name@version``."""

    name: str
    version: str

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def folder_name(self) -> str:
        """``<name>-<version>``, a scoped ``@scope/name`` written ``scope+name``."""
        return f"{self.name.removeprefix('@').replace('/', '+')}-{self.version}"


#: The official ACP TypeScript SDK: the test agents and the test client use it.
ACP_TS_SDK = NpmPackage("@agentclientprotocol/sdk", "2.4.0")
#: A headless ACP client CLI (openclaw/acpx). Its ``engines`` says node >= 22.13,
#: but what the tests use runs on node 20 (checked by :func:`acpx_command`).
ACPX = NpmPackage("acpx", "0.19.1")
#: A WebSocket client for node: node 20 has no global ``WebSocket``, and the SDK's
#: ``experimental/ws-client`` can send an ``Authorization`` header only through a
#: constructor that takes headers, such as ``ws``'s.
WS = NpmPackage("ws", "8.18.3")
#: Real coding agents, started offline (they answer ``initialize`` without an
#: account): Zed's ACP adapter of Codex, which brings its binary in a platform
#: package, and the ACP adapter of Claude Code (``engines.node >= 22``; what
#: ``initialize`` needs runs on node 20).
CODEX_ACP = NpmPackage("@zed-industries/codex-acp", "0.16.0")
CLAUDE_AGENT_ACP = NpmPackage("@agentclientprotocol/claude-agent-acp", "0.101.0")


class NpmUnavailable(RuntimeError):
    """node/npm is missing, or the package could not be installed; the message says why."""


def cache_root() -> Path:
    """The cache folder: ``$OMA_NPM_CACHE``, else ``~/.cache/oma-bridge/npm``."""
    configured = os.environ.get("OMA_NPM_CACHE")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "oma-bridge" / "npm"


def package_dir(package: NpmPackage, root: Path | None = None) -> Path:
    """The folder ``package`` is (or will be) installed in; it holds ``node_modules``."""
    return (root or cache_root()) / package.folder_name


def _has_version(package: NpmPackage, folder: Path) -> bool:
    try:
        manifest = json.loads((folder / "node_modules" / package.name / "package.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("version") == package.version


def _installed(package: NpmPackage, folder: Path) -> bool:
    return (folder / MARKER).is_file() and _has_version(package, folder)


@contextlib.contextmanager
def _locked(path: Path, timeout_s: float) -> Iterator[None]:
    """An exclusive ``flock`` on ``path``, waited for at most ``timeout_s``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise NpmUnavailable(
                        f"another process held {path} for more than {timeout_s:.0f} s"
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _error_summary(output: str) -> str:
    """The telling part of npm's output: ``<code>: <first descriptive error line>``.

    npm's *last* lines are generic (a proxy hint, the debug log's path), so the
    summary takes the ``npm error code`` line and the first line that describes
    the error (``404 Not Found - GET ...``, ``FetchError: ... ECONNREFUSED``).
    """
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line.split(" ", 2)[2] for line in lines if line.startswith("npm error ")]
    code = next((e.removeprefix("code ") for e in errors if e.startswith("code ")), None)
    generic = ("code ", "syscall ", "errno ", "at ", "{", "}", "A complete log", "If you are")
    detail = next((e for e in errors if not e.startswith(generic)), None)
    if detail is None:
        return lines[-1] if lines else "(no output)"
    return f"{code}: {detail}" if code else detail


def _run_npm(command: list[str], cwd: Path, timeout_s: float) -> None:
    env = {**os.environ, "npm_config_update_notifier": "false"}
    # One quick retry rather than npm's default two with 10-60 s back-off: without a
    # registry, a test session skips in seconds instead of minutes. The env can override.
    for key, value in (
        ("npm_config_fetch_retries", "1"),
        ("npm_config_fetch_retry_mintimeout", "2000"),
        ("npm_config_fetch_retry_maxtimeout", "10000"),
    ):
        env.setdefault(key, value)
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # so a timeout can end npm and whatever it started
    )
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise NpmUnavailable(f"`{' '.join(command)}` timed out after {timeout_s:.0f} s") from None
    if process.returncode != 0:
        text = output.decode(errors="replace")
        raise NpmUnavailable(
            f"`{' '.join(command)}` failed (exit {process.returncode}): {_error_summary(text)}"
        )


def install_package(
    package: NpmPackage, *, root: Path | None = None, timeout_s: float = INSTALL_TIMEOUT_S
) -> Path:
    """Install ``package`` into its cache folder unless it is there already; return the folder.

    Raises :class:`NpmUnavailable` when npm is missing or the install fails or
    takes more than ``timeout_s``.
    """
    folder = package_dir(package, root)
    if _installed(package, folder):
        return folder
    npm = shutil.which("npm")
    if npm is None:
        raise NpmUnavailable(f"npm is not on PATH (needed to install {package.spec})")
    command = [
        npm,
        "install",
        "--prefix",
        str(folder),
        "--no-audit",
        "--no-fund",
        "--prefer-offline",
        "--ignore-scripts",  # the peers need no install scripts; run nobody's code at install
        package.spec,
    ]
    with _locked(folder.with_name(folder.name + ".lock"), timeout_s + 60):
        if _installed(package, folder):  # another session finished it meanwhile
            return folder
        if folder.exists():  # a failed or interrupted earlier attempt
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        try:
            _run_npm(command, folder, timeout_s)
            if not _has_version(package, folder):
                raise NpmUnavailable(
                    f"`{' '.join(command)}` succeeded but {package.spec} is not in {folder}"
                )
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        marker = {"spec": package.spec, "installed_at": time.time()}
        partial = folder / (MARKER + ".partial")
        partial.write_text(json.dumps(marker))
        partial.rename(folder / MARKER)
    return folder


# One failed install per package and session is enough: later tests skip at once.
_failures: dict[str, str] = {}


def require_package(package: NpmPackage) -> Path:
    """:func:`install_package`, skipping the calling test when it cannot."""
    if package.spec in _failures:
        pytest.skip(_failures[package.spec])
    try:
        return install_package(package)
    except NpmUnavailable as error:
        _failures[package.spec] = f"{package.spec} unavailable: {error}"
        pytest.skip(_failures[package.spec])


def require_node() -> str:
    """The ``node`` executable, skipping the calling test when there is none."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH (needed for the npm test peers)")
    return node


def ts_sdk_dir() -> Path:
    """A folder whose ``node_modules`` holds ``@agentclientprotocol/sdk``.

    ``$OMA_ACP_TS_SDK_DIR`` names one installed by hand; else the pinned
    version is installed into the cache (or the test skipped).
    """
    require_node()
    configured = os.environ.get("OMA_ACP_TS_SDK_DIR")
    if configured:
        folder = Path(configured).expanduser()
        if not (folder / "node_modules" / ACP_TS_SDK.name / "package.json").is_file():
            pytest.skip(f"OMA_ACP_TS_SDK_DIR={folder} holds no node_modules/{ACP_TS_SDK.name}")
        return folder
    return require_package(ACP_TS_SDK)


_acpx_checked: dict[Path, str | None] = {}


def acpx_command() -> list[str]:
    """``[node, <acpx's cli.js>]``: the pinned acpx, checked to start on this node.

    acpx 0.19.1 declares ``engines.node >= 22.13.0``; if its CLI does not start
    here (``--version``), the calling test is skipped saying so.
    """
    node = require_node()
    folder = require_package(ACPX)
    manifest = json.loads((folder / "node_modules" / ACPX.name / "package.json").read_text())
    bin_field = manifest.get("bin")
    relative = bin_field.get("acpx") if isinstance(bin_field, dict) else bin_field
    cli = folder / "node_modules" / ACPX.name / str(relative)
    command = [node, str(cli)]
    if folder not in _acpx_checked:
        _acpx_checked[folder] = _acpx_start_problem(command)
    problem = _acpx_checked[folder]
    if problem is not None:
        pytest.skip(problem)
    return command


def _acpx_start_problem(command: list[str]) -> str | None:
    try:
        done = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except subprocess.TimeoutExpired:
        return f"`{' '.join(command)} --version` timed out"
    if done.returncode == 0 and done.stdout.strip() == ACPX.version:
        return None
    node_version = subprocess.run(
        [command[0], "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    tail = _error_summary(done.stderr + done.stdout)
    return (
        f"{ACPX.spec} does not start on node {node_version} (it declares node >= 22.13.0): "
        f"`{' '.join(command)} --version` exit {done.returncode}: {tail}"
    )
