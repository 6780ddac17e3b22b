"""The status page in a real headless Chromium, against a real ``oma-bridge serve``.

:func:`status_page` starts both: the daemon (``lifecycle.harness``: a
subprocess with a TCP listener on a free port, the built-in profiles plus
two test profiles) and a browser with one tab, and hands them over as a
:class:`StatusPage`.  A test client reaches the same daemon on its unix
socket (:meth:`StatusPage.client`), declaring no permissions, so that
permission requests of its runs go to the page, which watches every agent.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from lifecycle.harness import SCENARIO_AGENT, DaemonProcess, config_text, daemon_process

from oma_bridge.client import Client, connect
from oma_bridge.server.default_config import DEFAULT_CONFIG_TOML

from .chromium import Browser, Page, chromium, chromium_path

TICKER = Path(__file__).with_name("ticker.py")

#: The built-in profiles (echo, wordcount, demo), as the embedded config has them.
BUILT_IN_AGENTS = DEFAULT_CONFIG_TOML[DEFAULT_CONFIG_TOML.index("[agents.") :]

TEST_AGENTS = f"""
[agents.scenario]
kind = "acp"
description = "The ACP scenario agent of the tests: asks permission on 'tools'"
command = "{sys.executable}"
args = ["{SCENARIO_AGENT}"]
fs = "none"

[agents.ticker]
kind = "process"
description = "Streams the words of its prompt, a few a second"
command = "{sys.executable}"
args = ["{TICKER}", "0.3"]
input = "stdin"
"""

SERVER = 'tcp = "127.0.0.1:0"\n'


@pytest.fixture
def folder() -> Iterator[Path]:
    """A private folder with a short path (unix socket paths are limited to ~100 bytes)."""
    chromium_path()  # skip before anything starts when there is no browser
    path = Path(tempfile.mkdtemp(prefix="omu-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class StatusPage:
    daemon: DaemonProcess
    browser: Browser
    page: Page
    #: ``http://127.0.0.1:PORT``: where the page comes from.
    origin: str
    token: str

    @property
    def link(self) -> str:
        return f"{self.origin}/ui#token={self.token}"

    @property
    def audit_path(self) -> Path:
        return self.daemon.folder / "state" / "oma-bridge" / "audit.jsonl"

    def client(self, **options: Any) -> contextlib.AbstractAsyncContextManager[Client]:
        """A test client on the unix socket (no permissions declared unless a handler is given)."""
        return connect(socket=self.daemon.folder / "bridge.sock", client_name="ui-tests", **options)

    async def open(self, link: str | None = None) -> None:
        """Load the page; with the token, wait until it shows the daemon's data."""
        await self.page.navigate(link or self.link)
        if link is None:
            await self.page.wait_for("document.querySelectorAll('#profile-rows tr').length > 0")

    async def wait_watched(self, agent_id: str) -> None:
        """Until the page watches the agent (it learns of new agents by polling daemon/status)."""
        await self.page.wait_for(
            f'document.querySelector(\'tr[data-agent-id="{agent_id}"][data-watched="true"]\')'
        )

    async def check_clean(self, *, also: tuple[str, ...] = ()) -> None:
        """No script error, no CSP violation, no request beyond the daemon's origin (and ``also``).

        The daemon's log never shows the token either.
        """
        page = self.page
        exceptions = page.events("Runtime.exceptionThrown")
        assert exceptions == [], exceptions
        assert await page.evaluate("window.__cspViolations") == []
        requests = [event["request"]["url"] for event in page.events("Network.requestWillBeSent")]
        sockets = [event["url"] for event in page.events("Network.webSocketCreated")]
        assert requests, "the browser's network log is empty"
        foreign = [
            url for url in requests if not url.startswith(self.origin + "/") and url not in also
        ]
        assert foreign == [], foreign
        ws_origin = "ws" + self.origin.removeprefix("http")
        assert {url for url in sockets} <= {ws_origin + "/"}, sockets
        # The fragment stays in the browser: the token is in no URL it asked for.
        assert all(self.token not in url for url in requests + sockets)
        assert self.token not in self.daemon.log()


@contextlib.asynccontextmanager
async def status_page(folder: Path, agents: str = TEST_AGENTS) -> AsyncIterator[StatusPage]:
    text = config_text(folder, SERVER, BUILT_IN_AGENTS + agents)
    async with daemon_process(folder, text) as daemon, chromium() as browser:
        discovery = orjson.loads(daemon.discovery.read_bytes())
        origin = discovery["url"].replace("ws://", "http://").rstrip("/")
        page = await browser.new_page()
        yield StatusPage(daemon, browser, page, origin, discovery["token"])
