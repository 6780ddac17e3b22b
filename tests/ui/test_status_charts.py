"""The status page's charts (PROTOCOL §20.3): runs per minute and run duration, in Chromium.

After a known mix of runs, what the page drew (each bar and each point
carries the figures it was drawn from) must equal what ``GET /metrics``
of the same daemon says, read with Prometheus' own text parser: the page
and the metrics are one set of figures.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from oma_bridge.results import AgentRunResult

from .conftest import TEST_AGENTS, StatusPage, status_page

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

FAILER = """
[agents.failer]
kind = "process"
command = "sh"
args = ["-c", "echo no; exit 3"]
"""


async def scrape(ui: StatusPage) -> dict[str, list[tuple[dict[str, str], float]]]:
    async with httpx.AsyncClient() as http:
        answer = await http.get(
            f"{ui.origin}/metrics", headers={"Authorization": f"Bearer {ui.token}"}
        )
    assert answer.status_code == 200, answer.text
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


async def test_the_charts_draw_what_the_metrics_count(folder: Path) -> None:
    async with status_page(folder, TEST_AGENTS + FAILER) as ui, ui.client() as client:
        await ui.open()
        page = ui.page
        # Before any run: empty charts that say so.
        assert "No run ended" in await page.text("#rate-desc")
        assert await page.evaluate("document.querySelectorAll('#rate-chart rect.bar').length") == 0
        results: list[AgentRunResult] = []
        with anyio.fail_after(60):
            echo = await client.open("echo")
            for n in range(3):
                results.append(await echo.run(f"hello {n}"))
            failer = await client.open("failer")
            for _ in range(2):
                results.append(await failer.run("x"))
            results.append(await client.run_agent("wordcount", "one two"))
            ticker = await client.open("ticker")
            async with anyio.create_task_group() as tg:

                async def tick() -> None:
                    results.append(await ticker.run("a b c d e f g h i j", run_id="tick"))

                tg.start_soon(tick)
                while not (await client.status())["processes"]:  # noqa: ASYNC110 - the daemon
                    await anyio.sleep(0.05)
                assert await client.cancel("tick") is True
        assert Counter(r.status.code for r in results) == {"ok": 4, "error": 2, "cancelled": 1}
        # The page polls daemon/status: its charts follow without a reload.
        drawn = (
            "[...document.querySelectorAll('#rate-chart rect.bar')]"
            ".reduce((n, r) => n + Number(r.dataset.count), 0)"
        )
        assert await page.wait_for(f"{drawn} === {len(results)} && {drawn}") == len(results)
        metrics = await scrape(ui)
        bars = await page.evaluate(
            "[...document.querySelectorAll('#rate-chart rect.bar')]"
            ".map((r) => [r.dataset.status, Number(r.dataset.count), Number(r.dataset.minute)])"
        )
        charted: Counter[str] = Counter()
        for status, count, _minute in bars:
            charted[status] += count
        counted: Counter[str] = Counter()
        for labels, value in metrics["oma_bridge_runs_total"]:
            counted[labels["status"]] += int(value)
        assert charted == counted == {"ok": 4, "error": 2, "cancelled": 1}
        # Each bar is a minute of the last hour, at most an hour old.
        assert all(minute % 60 == 0 for _, _, minute in bars)
        points = await page.evaluate(
            "[...document.querySelectorAll('#duration-chart g.point')]"
            ".map((p) => [Number(p.dataset.count), Number(p.dataset.sum), Number(p.dataset.max)])"
        )
        histogram_count = sum(v for _, v in metrics["oma_bridge_run_duration_seconds_count"])
        histogram_sum = sum(v for _, v in metrics["oma_bridge_run_duration_seconds_sum"])
        assert sum(count for count, _, _ in points) == histogram_count == len(results)
        assert abs(sum(total for _, total, _ in points) - histogram_sum) < 1e-6
        assert all(0 < longest <= total for _, total, longest in points)
        # A mean line joins the minutes; the text says what the picture shows.
        assert await page.evaluate(
            "document.querySelector('#duration-chart path.mean-line') !== null"
        )
        assert (await page.text("#rate-desc")).startswith("7 runs ended in the last hour: 4 ok")
        assert "over 7 runs" in await page.text("#duration-desc")
        role = await page.evaluate("document.getElementById('rate-chart').getAttribute('role')")
        assert role == "img"
        await ui.check_clean()
