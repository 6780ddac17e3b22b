"""The status page (PROTOCOL §16) in a real headless Chromium, against a real daemon.

Every test ends with :meth:`StatusPage.check_clean`: no script error, no
CSP violation, and the browser's own network log shows no request beyond
the daemon's origin.  ``OMA_BRIDGE_UI_SCREENSHOT=docs/img/status-page.png``
makes the screenshot test write the picture of ``docs/status-page.md``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import orjson
import pytest
from support.fake_browser import fake_browser, opened

from oma_bridge._version import __version__
from oma_bridge.backends import PermissionRequest
from oma_bridge.client import RemoteAgent
from oma_bridge.results import AgentRunResult

from .conftest import StatusPage, status_page

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


@contextlib.asynccontextmanager
async def _bounded_group(seconds: float = 40) -> AsyncIterator[anyio.abc.TaskGroup]:
    """A task group that may last ``seconds`` at most: a stuck run fails the test fast."""
    with anyio.fail_after(seconds):
        async with anyio.create_task_group() as tg:
            yield tg


def _js(value: str) -> str:
    return orjson.dumps(value).decode()


async def _finished_row(ui: StatusPage, run_id: str) -> str:
    """The text of the run's row in "Last finished runs", once it is there."""
    selector = _js(f'#finished-rows tr[data-run-id="{run_id}"]')
    return str(await ui.page.wait_for(f"document.querySelector({selector})?.innerText"))


def _audit(ui: StatusPage, event: str) -> list[dict[str, Any]]:
    lines = ui.audit_path.read_bytes().splitlines() if ui.audit_path.exists() else []
    return [r for r in map(orjson.loads, lines) if r["event"] == event]


async def _run(
    agent: RemoteAgent, prompt: str, results: list[AgentRunResult], run_id: str | None = None
) -> None:
    results.append(await agent.run(prompt, run_id=run_id))


async def test_the_page_lists_the_built_in_profiles(folder: Path) -> None:
    async with status_page(folder) as ui:
        await ui.open()
        page = ui.page
        names = await page.evaluate(
            "[...document.querySelectorAll('#profile-rows tr')].map((r) => r.dataset.profile)"
        )
        assert {"echo", "wordcount", "demo"} <= set(names)
        echo = await page.text('#profile-rows tr[data-profile="echo"]')
        assert "llm" in echo and "echo-1" in echo
        # The summary comes with the first daemon/status answer, after the profiles.
        await page.wait_for("document.querySelector('#summary').textContent.includes('daemon ')")
        assert f"daemon {__version__}" in await page.text("#summary")
        assert await page.evaluate("document.getElementById('no-access').hidden") is True
        # The token left the address bar (a shared screen shows none); a reload keeps it.
        assert await page.evaluate("location.href") == f"{ui.origin}/ui"
        await page.navigate(f"{ui.origin}/ui")
        await page.wait_for("document.querySelectorAll('#profile-rows tr').length")
        # Landmarks and headings a screen reader can walk.
        headings = await page.evaluate(
            "[...document.querySelectorAll('main section > h2')].map((h) => h.textContent)"
        )
        assert "Pending permission requests" in headings and "Audit log, newest first" in headings
        assert (
            await page.evaluate("document.querySelectorAll('thead th:not([scope=col])').length")
            == 0
        )
        await ui.check_clean()


async def test_the_link_of_oma_bridge_ui_opens_the_page(folder: Path, tmp_path: Path) -> None:
    async with status_page(folder) as ui:
        token_file = tmp_path / "token"
        token_file.write_text(ui.token)
        url = "ws" + ui.origin.removeprefix("http") + "/"
        keep = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
        env = {**keep, "XDG_RUNTIME_DIR": str(tmp_path), "BROWSER": str(fake_browser(tmp_path))}
        command = [sys.executable, "-m", "oma_bridge.cli", "ui", "--url", url]
        done = await anyio.run_process([*command, "--token-file", str(token_file)], env=env)
        assert done.stdout.decode() == ui.link + "\n"
        # What the CLI gave the browser: a file of the user's that forwards to the link.
        (forward,) = opened(tmp_path)
        await ui.page.navigate(forward)
        await ui.page.wait_for(
            "location.pathname === '/ui' && document.querySelectorAll('#profile-rows tr').length"
        )
        await ui.check_clean(also=(forward,))


async def test_a_stream_shows_its_text_as_it_arrives(folder: Path) -> None:
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
    async with status_page(folder) as ui, ui.client() as client:
        await ui.open()
        agent = await client.open("ticker")
        await ui.wait_watched(agent.agent_id)
        page = ui.page
        async with _bounded_group() as tg:
            stream = agent.stream(words, run_id="run-ticker")

            async def consume() -> None:
                async for _event in stream:
                    pass

            tg.start_soon(consume)
            card = _js('#run-list article[data-run-id="run-ticker"]')
            text = await page.wait_for(
                f"(() => {{ const t = document.querySelector({card} + ' pre')?.textContent ?? '';"
                " return t.includes('beta') && t; })()"
            )
            # Seen while the run is still going: the words after it have not come yet.
            assert text.startswith("alpha beta") and "kappa" not in text
            state = await page.text('#run-list article[data-run-id="run-ticker"] dd .state')
            assert state.startswith("running")
            assert "ticker" in await page.text('#run-list article[data-run-id="run-ticker"] h3')
        assert stream.result is not None and stream.result.success
        row = await _finished_row(ui, "run-ticker")
        assert "ok" in row and "agent/stream" in row and "kappa" in row
        assert " s" in row  # its duration, seen live
        await page.wait_for("document.querySelector('#run-list article') === null")
        await ui.check_clean()


async def test_a_permission_request_is_answered_from_the_page(folder: Path) -> None:
    async with status_page(folder) as ui, ui.client() as client:
        await ui.open()
        # The run's own connection declared no permissions: the request goes to watchers.
        agent = await client.open("scenario")
        await ui.wait_watched(agent.agent_id)
        page = ui.page
        results: list[AgentRunResult] = []
        async with _bounded_group() as tg:
            tg.start_soon(_run, agent, "tools", results)
            await page.wait_for("document.querySelector('#permission-list article')")
            card = "#permission-list article"
            assert await page.text(f"{card} h3") == "Edit file"
            labels = await page.evaluate(
                f"[...document.querySelectorAll('{card} button')].map((b) => b.textContent)"
            )
            assert labels == [
                "Always (allow always)",
                "Once (allow once)",
                "No (reject once)",
                "Never (reject always)",
            ]
            assert "scenario" in await page.text(card)
            await page.click(f'{card} button[data-option-id="ao"]')
        (result,) = results
        assert result.output == "permission:ao"  # the agent received the page's choice
        # What the acp profile's agent said at its initialize (daemon/status, PROTOCOL §22.2).
        cell = "document.querySelector('#profile-rows tr[data-profile=scenario] td.capabilities')"
        said = await page.wait_for(
            f"{cell}.textContent.startsWith('loadSession') && {cell}.textContent"
        )
        assert said == "loadSession · prompt: text · MCP: stdio"
        await page.wait_for("document.querySelector('#permission-list article') === null")
        assert await page.evaluate("document.getElementById('permission-empty').hidden") is False
        (decision,) = _audit(ui, "permission")
        assert decision["decidedBy"]["client"] == {"name": "oma-bridge-ui", "version": __version__}
        assert decision["outcome"] == {"outcome": "selected", "optionId": "ao"}
        # The page's own tail of the audit log shows who decided.
        shown = await page.wait_for(
            "document.querySelector('#audit-rows tr[data-event=permission]')?.innerText"
        )
        assert "oma-bridge-ui" in shown and "Edit file" in shown and "ao" in shown
        await ui.check_clean()


async def test_an_answer_from_elsewhere_withdraws_the_request_from_the_page(folder: Path) -> None:
    shown = anyio.Event()

    async def decide(request: PermissionRequest) -> str:
        await shown.wait()
        return "ro"

    async with (
        status_page(folder) as ui,
        ui.client() as runner,
        ui.client(permission_handler=decide) as elsewhere,
    ):
        await ui.open()
        agent = await runner.open("scenario")
        await agent.run("echo first")  # a journal entry, so that the watch below replays one
        await ui.wait_watched(agent.agent_id)
        results: list[AgentRunResult] = []
        async with _bounded_group() as tg:
            watching = anyio.Event()

            async def watch() -> None:
                async for _item in elsewhere.watch(agent.agent_id, after_seq=0):
                    watching.set()

            tg.start_soon(watch)
            await watching.wait()  # the other client is a watcher with permissions too
            tg.start_soon(_run, agent, "tools", results)
            await ui.page.wait_for("document.querySelector('#permission-list article')")
            shown.set()  # now the other client answers first
            await ui.page.wait_for("document.querySelector('#permission-list article') === null")
            assert "withdrawn" in await ui.page.text("#announce")
            while not results:  # noqa: ASYNC110 (the run's answer, in the task above)
                await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
        assert results[0].output == "permission:ro"
        (decision,) = _audit(ui, "permission")
        assert decision["decidedBy"]["client"]["name"] == "ui-tests"
        await ui.check_clean()


async def test_a_run_is_cancelled_from_the_page_with_the_keyboard(folder: Path) -> None:
    async with status_page(folder) as ui, ui.client() as client:
        await ui.open()
        agent = await client.open("scenario")
        await ui.wait_watched(agent.agent_id)
        results: list[AgentRunResult] = []
        async with _bounded_group() as tg:
            tg.start_soon(_run, agent, "slow", results, "run-slow")
            button = _js('#run-list button[data-run-id="run-slow"]')
            await ui.page.wait_for(f"document.querySelector({button})")
            await ui.page.wait_for(
                "document.querySelector('#run-list article[data-run-id=\"run-slow\"] pre')"
                "?.textContent.includes('started')"
            )
            await ui.page.evaluate(f"document.querySelector({button}).focus()")
            await ui.page.press_enter()
        assert results[0].status.code == "cancelled"
        assert "cancelled" in await _finished_row(ui, "run-slow")
        await ui.check_clean()


async def test_a_lost_connection_shows_a_banner_and_catches_up(folder: Path) -> None:
    async with status_page(folder) as ui, ui.client() as client:
        await ui.open()
        page = ui.page
        agent = await client.open("echo")
        await ui.wait_watched(agent.agent_id)
        before = await agent.run("said before the cut")
        assert "said before the cut" in await _finished_row(ui, before.run_id)
        offline = {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}
        # The network goes: the socket drops, and every new attempt fails until it is back.
        await page.send("Network.emulateNetworkConditions", offline)
        assert await page.close_websockets() >= 1
        await page.wait_for("!document.getElementById('banner').hidden")
        assert "Reconnecting" in await page.text("#banner")
        missed = [await agent.run(f"said while away {n}") for n in range(3)]
        await page.send("Network.emulateNetworkConditions", {**offline, "offline": False})
        await page.wait_for("document.getElementById('banner').hidden", within=20)
        for n, result in enumerate(missed):
            assert f"said while away {n}" in await _finished_row(ui, result.run_id)
        # Caught up from the last seq seen: nothing lost, nothing twice.
        ids = await page.evaluate(
            "[...document.querySelectorAll('#finished-rows tr')].map((r) => r.dataset.runId)"
        )
        assert sorted(ids) == sorted([before.run_id, *(r.run_id for r in missed)])
        assert "Reconnected" in await page.text("#announce")
        await ui.check_clean()


async def test_without_the_right_token_the_page_says_what_to_do(folder: Path) -> None:
    async with status_page(folder) as ui:
        page = ui.page
        for link, reason in (
            (f"{ui.origin}/ui#token={'0' * 64}", "did not accept this link's token"),
            (f"{ui.origin}/ui", "has no token"),
        ):
            await ui.open(link)
            await page.wait_for("!document.getElementById('no-access').hidden")
            message = await page.text("#no-access")
            assert "oma-bridge ui" in message and reason in message
            # Nothing else: no data, no section of the status.
            assert await page.evaluate("document.getElementById('main').hidden") is True
            assert await page.evaluate("document.querySelectorAll('main tbody tr').length") == 0
            assert await page.text("#summary") == ""
        # The wrong token was offered to the daemon (and refused); no token: no websocket.
        sockets = page.events("Network.webSocketCreated")
        assert len(sockets) == 2  # the first try and the one that confirms the refusal
        await ui.check_clean()


async def test_a_screenshot_with_a_run_streaming_and_a_permission_pending(
    folder: Path, tmp_path: Path
) -> None:
    words = (
        "The status page follows every agent of the daemon and streams the text of each run"
        " as it arrives, word by word, while a permission request waits for an answer"
    )
    async with status_page(folder) as ui, ui.client() as client:
        await ui.open()
        page = ui.page
        echo = await client.open("echo")
        ticker = await client.open("ticker")
        scenario = await client.open("scenario")
        for agent in (echo, ticker, scenario):
            await ui.wait_watched(agent.agent_id)
        await echo.run("hello from a test client")
        await client.open("wordcount")
        results: list[AgentRunResult] = []
        async with _bounded_group() as tg:  # a first decision, for the audit log's tail
            tg.start_soon(_run, scenario, "tools", results)
            await page.wait_for("document.querySelector('#permission-list article')")
            await page.click('#permission-list button[data-option-id="ao"]')
        await page.wait_for("document.querySelector('#audit-rows tr')")
        async with _bounded_group() as tg:
            tg.start_soon(_run, ticker, words, results, "run-ticker")
            tg.start_soon(_run, scenario, "tools", results)
            await page.wait_for("document.querySelector('#permission-list article')")
            await page.wait_for(
                "document.querySelector('#run-list').innerText.includes('waiting for')"
            )
            ticking = _js('#run-list article[data-run-id="run-ticker"] pre')
            await page.wait_for(
                f"(document.querySelector({ticking})?.textContent ?? '').split(' ').length > 8"
            )
            await page.wait_for("document.querySelectorAll('#process-rows tr').length >= 2")
            shot = tmp_path / "status-page.png"
            data = await page.screenshot(shot)
            await page.click('#permission-list button[data-option-id="ao"]')
            await client.cancel("run-ticker")
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20_000
        target = os.environ.get("OMA_BRIDGE_UI_SCREENSHOT")
        if target:
            shutil.copyfile(shot, target)
        await ui.check_clean()
