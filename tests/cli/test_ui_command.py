"""``oma-bridge ui``: the status page's link, from the discovery file, and a browser."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit

import anyio
import httpx
import orjson
import pytest
from lifecycle.harness import DaemonProcess, config_text, daemon_process
from support.fake_browser import fake_browser, opened

pytestmark = pytest.mark.anyio

AGENTS = """
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"
"""


@pytest.fixture
def runtime() -> Iterator[Path]:
    """``$XDG_RUNTIME_DIR`` of the test: the daemon's folder is ``oma-bridge`` in it."""
    base = Path(tempfile.mkdtemp(prefix="omui-", dir="/tmp"))
    (base / "oma-bridge").mkdir(mode=0o700)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@asynccontextmanager
async def _daemon(runtime: Path, *, tcp: bool = True) -> AsyncIterator[DaemonProcess]:
    folder = runtime / "oma-bridge"
    server = 'tcp = "127.0.0.1:0"' if tcp else ""
    async with daemon_process(folder, config_text(folder, server, AGENTS)) as daemon:
        yield daemon


def _ui(runtime: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")
    }
    environment |= {"XDG_RUNTIME_DIR": str(runtime), **env}
    return subprocess.run(
        [sys.executable, "-m", "oma_bridge.cli", "ui", *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=30,
    )


def _discovery(daemon: DaemonProcess) -> dict[str, str]:
    return orjson.loads(daemon.discovery.read_bytes())  # type: ignore[no-any-return]


async def test_ui_no_browser_prints_the_link_and_only_that(runtime: Path) -> None:
    async with _daemon(runtime) as daemon:
        discovery = _discovery(daemon)
        done = _ui(runtime, "--no-browser")
        assert (done.returncode, done.stderr) == (0, "")
        port = urlsplit(discovery["url"]).port
        assert done.stdout == f"http://127.0.0.1:{port}/ui#token={discovery['token']}\n"
        # The link serves the page (the fragment stays with the client).
        async with httpx.AsyncClient() as http:
            page = await http.get(done.stdout.strip())
        assert page.status_code == 200 and "<main" in page.text
        assert discovery["token"] not in daemon.log()


async def test_ui_without_a_tcp_listener_says_to_set_one(runtime: Path) -> None:
    async with _daemon(runtime, tcp=False) as daemon:
        done = _ui(runtime, "--no-browser")
        assert done.returncode == 3
        assert done.stdout == ""
        assert "[server] tcp" in done.stderr and "TCP listener" in done.stderr
        assert _discovery(daemon)["token"] not in done.stderr


async def test_ui_opens_a_browser_on_a_private_file_not_on_the_link(runtime: Path) -> None:
    browser = fake_browser(runtime)
    async with _daemon(runtime) as daemon:
        token = _discovery(daemon)["token"]
        done = _ui(runtime, BROWSER=str(browser))
        assert done.returncode == 0, done.stderr
        link = done.stdout.strip()
        (argument,) = opened(runtime)
        # No other local user can read the token off the browser's command line...
        assert token not in argument and argument.startswith("file://")
        redirect = anyio.Path(unquote(urlsplit(argument).path))
        # ...but the browser finds the link in a file only its user can read.
        assert redirect.parent == anyio.Path(runtime / "oma-bridge")
        assert stat.S_IMODE((await redirect.stat()).st_mode) == 0o600
        assert f'content="0;url={link}"' in await redirect.read_text()
        assert token not in done.stderr


def test_ui_with_url_and_token_file(runtime: Path) -> None:
    token_file = runtime / "token"
    token_file.write_text("a" * 40 + "\n")
    done = _ui(
        runtime,
        "--no-browser",
        "--url",
        "wss://bridge.example:7878/",
        "--token-file",
        str(token_file),
    )
    assert (done.returncode, done.stdout) == (
        0,
        f"https://bridge.example:7878/ui#token={'a' * 40}\n",
    )
    done = _ui(runtime, "--no-browser", "--url", "wss://bridge.example:7878/")
    assert done.returncode == 2 and "--token-file" in done.stderr
    done = _ui(runtime, "--no-browser")  # no daemon at all
    assert done.returncode == 3 and "no oma-bridge daemon is running" in done.stderr
