"""A headless Chromium driven over the Chrome DevTools Protocol, for the status page tests.

No driver package: Chromium is started with ``--remote-debugging-port=0``,
its ``DevToolsActivePort`` file (in the throw-away user-data-dir) gives the
browser's websocket, and CDP is spoken over it with the ``websockets``
library the project already depends on.  One page target is attached
(flattened sessions) with the ``Page``, ``Runtime`` and ``Network`` domains
on, so a test sees the page's own network log (``Network.requestWillBeSent``,
``Network.webSocketCreated``), its exceptions, and can evaluate script,
click with the mouse, press keys and take screenshots.

Chromium is the Debian package (``apt-get install chromium``); without it
:func:`chromium_path` skips the test with that command.  The browser runs in
its own process group, which the context manager kills at the end with every
process in it.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import orjson
import psutil
import pytest
from websockets.asyncio.client import ClientConnection, connect

__all__ = ["Browser", "Page", "chromium", "chromium_path"]

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--no-default-browser-check",
    "--hide-scrollbars",
    "--mute-audio",
)

START_TIMEOUT_S = 30.0
COMMAND_TIMEOUT_S = 20.0

#: Installed before any script of the page runs: a record of CSP violations.
_RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(e.violatedDirective + " " + e.blockedURI);
});
"""


def chromium_path() -> str:
    """The ``chromium`` executable, or skip the test saying how to get it."""
    path = shutil.which("chromium")
    if path is None:
        pytest.skip("the status page tests need Chromium: apt-get install chromium")
    return path


class CdpError(Exception):
    pass


@dataclass
class Browser:
    """The browser's CDP connection: commands by id, events to whoever listens."""

    ws: ClientConnection
    events: list[tuple[str | None, str, dict[str, Any]]] = field(default_factory=list)
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _waiting: dict[int, Any] = field(default_factory=dict)

    async def send(
        self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None
    ) -> Any:
        call_id = next(self._ids)
        message: dict[str, Any] = {"id": call_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](1)
        self._waiting[call_id] = send
        await self.ws.send(orjson.dumps(message).decode())
        with anyio.fail_after(COMMAND_TIMEOUT_S):
            answer = await receive.receive()
        receive.close()
        if "error" in answer:
            raise CdpError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    async def read(self) -> None:
        async for frame in self.ws:
            message = orjson.loads(frame)
            if "id" in message:
                waiter = self._waiting.pop(message["id"], None)
                if waiter is not None:
                    waiter.send_nowait(message)
                    waiter.close()
            else:
                self.events.append(
                    (message.get("sessionId"), message["method"], message.get("params", {}))
                )

    async def new_page(self, width: int = 1280, height: int = 900) -> Page:
        target = (await self.send("Target.createTarget", {"url": "about:blank"}))["targetId"]
        attached = await self.send("Target.attachToTarget", {"targetId": target, "flatten": True})
        page = Page(self, attached["sessionId"])
        for domain in ("Page", "Runtime", "Network"):
            await page.send(f"{domain}.enable")
        await page.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        await page.send("Page.addScriptToEvaluateOnNewDocument", {"source": _RECORD_VIOLATIONS})
        return page


@dataclass
class Page:
    """One tab: navigate, evaluate, wait for a condition, click, type, screenshot."""

    browser: Browser
    session: str

    async def send(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return await self.browser.send(method, params, session=self.session)

    def events(self, method: str) -> list[dict[str, Any]]:
        return [p for s, m, p in self.browser.events if s == self.session and m == method]

    async def navigate(self, url: str) -> None:
        """Load ``url`` (a new document: not a change of the fragment alone) and wait for it."""
        loads = len(self.events("Page.loadEventFired"))
        answer = await self.send("Page.navigate", {"url": url})
        if "errorText" in answer:
            raise CdpError(f"{url}: {answer['errorText']}")
        with anyio.fail_after(COMMAND_TIMEOUT_S):
            while len(self.events("Page.loadEventFired")) == loads:  # noqa: ASYNC110 (a poll)
                await anyio.sleep(0.02)

    async def evaluate(self, expression: str) -> Any:
        answer = await self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in answer:
            raise CdpError(f"{expression!r}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    async def wait_for(self, expression: str, within: float = 15.0) -> Any:
        """Poll ``expression`` until it is truthy in JavaScript's sense; its value.

        (An element comes back as ``{}``: truthy there, though not in Python.)
        """
        last: Any = None
        try:
            with anyio.fail_after(within):
                while True:
                    last = await self.evaluate(expression)
                    if last is not None and last is not False and last != "" and last != 0:
                        return last
                    await anyio.sleep(0.05)
        except TimeoutError:
            text = await self.evaluate("document.body ? document.body.innerText : ''")
            raise AssertionError(
                f"never true: {expression}\nlast: {last!r}\npage:\n{text}"
            ) from None

    async def text(self, selector: str) -> str:
        return str(await self.evaluate(f"document.querySelector({_js(selector)})?.innerText ?? ''"))

    async def _centre(self, selector: str) -> tuple[float, float]:
        box = await self.evaluate(
            f"(() => {{ const e = document.querySelector({_js(selector)});"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        return float(box[0]), float(box[1])

    async def click(self, selector: str) -> None:
        """A real left click in the middle of the element (mouse events, as a user's)."""
        x, y = await self._centre(selector)
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            await self.send(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1},
            )

    async def press_enter(self) -> None:
        """The Enter key, down and up, to the focused element (as a keyboard user would)."""
        common = {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13}
        await self.send("Input.dispatchKeyEvent", {"type": "keyDown", "text": "\r", **common})
        await self.send("Input.dispatchKeyEvent", {"type": "keyUp", **common})

    async def close_websockets(self) -> int:
        """Close every WebSocket of the page, as a network failure would; how many there were.

        (The page keeps its sockets to itself; the heap knows them by their prototype.)
        """
        prototype = await self.send("Runtime.evaluate", {"expression": "WebSocket.prototype"})
        found = await self.send(
            "Runtime.queryObjects", {"prototypeObjectId": prototype["result"]["objectId"]}
        )
        closed = await self.send(
            "Runtime.callFunctionOn",
            {
                "objectId": found["objects"]["objectId"],
                "functionDeclaration": "function () { for (const ws of this) ws.close(); "
                "return this.filter((ws) => ws.readyState !== WebSocket.CLOSED).length; }",
                "returnByValue": True,
            },
        )
        return int(closed["result"]["value"])

    async def screenshot(self, path: Path) -> bytes:
        """The whole page (beyond the viewport), as PNG, written to ``path``."""
        size = await self.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.scrollHeight]"
        )
        shot = await self.send(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1},
            },
        )
        data = base64.b64decode(shot["data"])
        await anyio.Path(path).write_bytes(data)
        return data


def _js(value: str) -> str:
    return orjson.dumps(value).decode()


async def _devtools_url(folder: Path, process: anyio.abc.Process, log: Path) -> str:
    marker = folder / "DevToolsActivePort"
    with anyio.fail_after(START_TIMEOUT_S):
        while True:
            if process.returncode is not None:
                output = await anyio.Path(log).read_text(errors="replace")
                raise AssertionError(f"chromium exited at start:\n{output}")
            with contextlib.suppress(OSError, ValueError):
                port, path = marker.read_text().split("\n")[:2]
                if port and path:
                    return f"ws://127.0.0.1:{int(port)}{path}"
            await anyio.sleep(0.05)


def _kill_group(process: anyio.abc.Process, seen: list[psutil.Process]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    for leftover in seen:
        with contextlib.suppress(psutil.Error):
            leftover.kill()


@contextlib.asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """A headless Chromium for the block; killed, with every process of it, at the end."""
    executable = chromium_path()
    folder = Path(tempfile.mkdtemp(prefix="omab-chromium-"))
    log = folder / "chromium.log"
    seen: list[psutil.Process] = []
    with log.open("wb") as output:
        process = await anyio.open_process(
            [
                executable,
                *FLAGS,
                f"--user-data-dir={folder}",
                "--remote-debugging-port=0",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            start_new_session=True,
        )
    try:
        url = await _devtools_url(folder, process, log)
        async with (
            connect(url, max_size=None, compression=None) as ws,
            anyio.create_task_group() as tg,
        ):
            browser = Browser(ws)
            tg.start_soon(browser.read)
            try:
                yield browser
            finally:
                with contextlib.suppress(psutil.Error):
                    seen = psutil.Process(process.pid).children(recursive=True)
                with contextlib.suppress(Exception), anyio.move_on_after(3):
                    await browser.send("Browser.close")
                tg.cancel_scope.cancel()
    finally:
        if not seen:
            with contextlib.suppress(psutil.Error):
                seen = psutil.Process(process.pid).children(recursive=True)
        _kill_group(process, seen)
        with anyio.move_on_after(5):
            await process.wait()
        await process.aclose()
        shutil.rmtree(folder, ignore_errors=True)
