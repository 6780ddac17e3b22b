"""``GET /metrics`` (PROTOCOL §20.3) of a real daemon, read with Prometheus' own text parser.

A known mix of runs (successes on three kinds, failures, a cancel, a
permission decided by a profile's policy and one by a client) goes through
the daemon; then every counter of ``/metrics`` must equal what happened, as
``prometheus_client.parser`` reads the text.  The door is the one of the
pre-upgrade policy: the token by ``Authorization: Bearer`` (401 without it,
unless ``metrics_public = true``), the Host and Origin checks always, and
the TCP listener only.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from acp_facade.harness import RawClient, text
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import unix_connect

from oma_bridge.client import connect
from oma_bridge.orchestration.tasks import TaskSpec
from oma_bridge.results import AgentRunResult
from oma_bridge.server.app import RunningServer

from .conftest import AGENTS, daemon

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

SCENARIO = Path(__file__).resolve().parent.parent / "agents" / "acp_scenario_agent.py"

AGENTS_UNDER_TEST = (
    AGENTS
    + f"""
[agents.failer]
kind = "process"
command = "sh"
args = ["-c", "echo no; exit 3"]

[agents.scenario]
kind = "acp"
command = "{sys.executable}"
args = ["{SCENARIO}"]
fs = "none"

[agents.refuser]
kind = "acp"
command = "{sys.executable}"
args = ["{SCENARIO}"]
fs = "none"
permission = "reject"
"""
)
TCP = 'tcp = "127.0.0.1:0"\n'

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> tuple[Samples, dict[str, str]]:
    """Every sample by (name, labels), and every family's type, as Prometheus reads them."""
    samples: Samples = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples, types


def of(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def by_label(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: value for (n, labels), value in samples.items() if n == name}


def metrics_url(running: RunningServer) -> str:
    return f"http://127.0.0.1:{running.port}/metrics"


async def scrape(running: RunningServer, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.get(metrics_url(running), headers=headers)


async def test_the_counters_equal_what_happened(short_dir: Path) -> None:
    async def allow_once(request: Any) -> str:
        return "ao"

    results: dict[str, list[AgentRunResult]] = {}

    def keep(profile: str, result: AgentRunResult) -> None:
        results.setdefault(profile, []).append(result)

    async with (
        daemon(short_dir, server=TCP, agents=AGENTS_UNDER_TEST) as running,
        connect(discovery_dir=short_dir, permission_handler=allow_once) as client,
    ):
        with anyio.fail_after(60):
            echo = await client.open("echo")
            for prompt in ("one", "two three"):
                keep("echo", await echo.run(prompt))
            counter = await client.open("wordcount")
            keep("wordcount", await counter.run("a b c"))
            keep("echo", await client.run_agent("echo", "one-off"))
            failer = await client.open("failer")
            keep("failer", await failer.run("x"))
            keep("failer", await failer.run("y"))
            scenario = await client.open("scenario")
            keep("scenario", await scenario.run("tools"))  # the client allows: "ao"
            keep("scenario", await scenario.run("error"))
            refuser = await client.open("refuser")
            keep("refuser", await refuser.run("tools"))  # the profile's policy: "ro"
            sleeper = await client.open("sleeper")
            async with anyio.create_task_group() as tg:

                async def sleep() -> None:
                    keep("sleeper", await sleeper.run("zzz", run_id="long"))

                tg.start_soon(sleep)
                while not (await client.status())["processes"]:  # noqa: ASYNC110 - the daemon
                    await anyio.sleep(0.05)
                assert await client.cancel("long") is True
        answer = await scrape(running, Authorization=f"Bearer {running.token}")
        stats = (await client.status())["runStats"]

    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    samples, types = parse(answer.text)
    kinds = {
        "echo": "llm",
        "wordcount": "process",
        "failer": "process",
        "scenario": "acp",
        "refuser": "acp",
        "sleeper": "process",
    }
    # What happened, from the results the runs answered.
    happened = Counter(
        (profile, kinds[profile], result.status.code)
        for profile, profile_results in results.items()
        for result in profile_results
    )
    assert happened == {
        ("echo", "llm", "ok"): 3,
        ("wordcount", "process", "ok"): 1,
        ("failer", "process", "error"): 2,
        ("scenario", "acp", "ok"): 1,
        ("scenario", "acp", "error"): 1,
        ("refuser", "acp", "ok"): 1,
        ("sleeper", "process", "cancelled"): 1,
    }
    assert results["scenario"][0].output.startswith("permission:ao"), results["scenario"][0]
    assert results["refuser"][0].output.startswith("permission:ro"), results["refuser"][0]
    runs = {
        (dict(labels)["profile"], dict(labels)["kind"], dict(labels)["status"]): value
        for labels, value in by_label(samples, "oma_bridge_runs_total").items()
    }
    assert runs == happened
    assert types["oma_bridge_runs"] == "counter"
    # Every one of these runs started: each is in the histogram, by profile and kind.
    assert types["oma_bridge_run_duration_seconds"] == "histogram"
    for (profile, kind), count in Counter((p, k) for p, k, _ in happened.elements()).items():
        assert of(samples, "oma_bridge_run_duration_seconds_count", profile=profile, kind=kind) == (
            count
        )
        inf = of(
            samples, "oma_bridge_run_duration_seconds_bucket", profile=profile, kind=kind, le="+Inf"
        )
        assert inf == count
        total = of(samples, "oma_bridge_run_duration_seconds_sum", profile=profile, kind=kind)
        assert total is not None and 0 < total < 60
    # The tokens the providers counted, by profile and direction.
    for profile, profile_results in results.items():
        for direction in ("input", "output"):
            spent = sum(getattr(r.token_usage, f"{direction}_tokens") for r in profile_results)
            counted = of(samples, "oma_bridge_tokens_total", profile=profile, direction=direction)
            assert (counted or 0) == spent, (profile, direction)
    assert sum(r.token_usage.output_tokens for r in results["echo"]) > 0
    # The two permission decisions, by the option the audit log says was chosen.
    decisions = {
        dict(labels)["decision"]: value
        for labels, value in by_label(samples, "oma_bridge_permission_decisions_total").items()
    }
    assert decisions == {"ao": 1, "ro": 1}
    # daemon/status's runStats (the page's charts) holds the same run ends, per minute.
    by_status: Counter[str] = Counter()
    for minute in stats["minutes"]:
        by_status.update(minute["runs"])
    assert by_status == Counter(status for _, _, status in happened.elements())
    assert sum(m["durationCount"] for m in stats["minutes"]) == sum(happened.values())
    summed = sum(by_label(samples, "oma_bridge_run_duration_seconds_sum").values())
    assert abs(sum(m["durationSumS"] for m in stats["minutes"]) - summed) < 1e-6
    # The gauges, read at the scrape: nothing was in flight any more, one connection.
    assert of(samples, "oma_bridge_runs_in_flight") == 0
    assert of(samples, "oma_bridge_runs_queued") == 0
    assert of(samples, "oma_bridge_connections") == 1
    journal = of(samples, "oma_bridge_journal_bytes")
    assert journal is not None and journal > 0
    assert of(samples, "oma_bridge_child_processes") is not None
    # The standard process metrics.
    assert (of(samples, "process_cpu_seconds_total") or 0) > 0
    assert (of(samples, "process_resident_memory_bytes") or 0) > 0
    assert (of(samples, "process_start_time_seconds") or 0) > 0


async def test_the_gauges_show_what_is_in_flight(short_dir: Path) -> None:
    server = TCP + "max_concurrent_runs = 1\n"
    async with (
        daemon(short_dir, server=server) as running,
        connect(discovery_dir=short_dir) as client,
    ):
        first, second = await client.open("sleeper"), await client.open("sleeper")
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: first.run("a", run_id="a"))
                while not (await client.status())["processes"]:  # noqa: ASYNC110 - the daemon
                    await anyio.sleep(0.05)
                tg.start_soon(lambda: second.run("b", run_id="b"))  # waits for the one slot
                while len((await client.status())["runs"]) < 2:  # noqa: ASYNC110 - the daemon
                    await anyio.sleep(0.05)
                answer = await scrape(running, Authorization=f"Bearer {running.token}")
                samples, _ = parse(answer.text)
                assert of(samples, "oma_bridge_runs_in_flight") == 2
                assert of(samples, "oma_bridge_runs_queued") == 1
                assert of(samples, "oma_bridge_child_processes") == 1
                assert await client.cancel("b") and await client.cancel("a")
        samples, _ = parse((await scrape(running, Authorization=f"Bearer {running.token}")).text)
    cancelled = of(
        samples, "oma_bridge_runs_total", profile="sleeper", kind="process", status="cancelled"
    )
    assert cancelled == 2
    # The one cancelled while it waited never started: it has no duration.
    count = of(samples, "oma_bridge_run_duration_seconds_count", profile="sleeper", kind="process")
    assert count == 1


async def test_a_team_run_is_one_run_of_kind_team(short_dir: Path) -> None:
    async with (
        daemon(short_dir, server=TCP) as running,
        connect(discovery_dir=short_dir) as client,
    ):
        with anyio.fail_after(30):
            team = await client.run_tasks(
                [
                    TaskSpec(title="Count", description="one two three", assignee="wordcount"),
                    TaskSpec(title="Say", description="hello", assignee="echo"),
                ],
                run_id="team",
            )
        assert team.success, team.output
        samples, _ = parse((await scrape(running, Authorization=f"Bearer {running.token}")).text)
    # One run of the daemon (docs/teams.md), labelled as no profile is; its tasks are its parts.
    runs = by_label(samples, "oma_bridge_runs_total")
    assert runs == {frozenset({("profile", ""), ("kind", "team"), ("status", "ok")}): 1}
    spent = team.token_usage.output_tokens
    assert (of(samples, "oma_bridge_tokens_total", profile="", direction="output") or 0) == spent


async def test_a_facade_prompt_is_a_run_of_its_profile(short_dir: Path) -> None:
    async with daemon(short_dir, server=TCP) as running:
        with anyio.fail_after(30):
            ws = await unix_connect(str(short_dir / "bridge.sock"), "ws://localhost/acp/echo")
            editor = RawClient(ws)
            await editor.initialize()
            session_id = await editor.new("/tmp")
            for words in ("hello", "hello again"):
                answer = await editor.prompt(session_id, text(words))
                assert answer["result"] == {"stopReason": "end_turn"}, answer
            await editor.close()
        samples, _ = parse((await scrape(running, Authorization=f"Bearer {running.token}")).text)
    runs = by_label(samples, "oma_bridge_runs_total")
    assert runs == {frozenset({("profile", "echo"), ("kind", "llm"), ("status", "ok")}): 2}


async def test_metrics_need_the_token(short_dir: Path) -> None:
    async with daemon(short_dir, server=TCP) as running:
        bearer = f"Bearer {running.token}"
        refused = await scrape(running)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == "Bearer"
        assert "oma_bridge" not in refused.text
        assert (await scrape(running, Authorization="Bearer " + "0" * 64)).status_code == 401
        assert (await scrape(running, Authorization=f"Basic {running.token}")).status_code == 401
        assert (await scrape(running, Authorization=bearer)).status_code == 200
        # The pre-upgrade policy holds: Host (DNS rebinding), Origin, no token in a URL.
        host = {"Authorization": bearer, "Host": f"evil.example:{running.port}"}
        assert (await scrape(running, **host)).status_code == 403
        origin = {"Authorization": bearer, "Origin": "http://evil.example"}
        assert (await scrape(running, **origin)).status_code == 403
        own = {"Authorization": bearer, "Origin": f"http://127.0.0.1:{running.port}"}
        assert (await scrape(running, **own)).status_code == 200
        async with httpx.AsyncClient() as http:
            in_url = await http.get(metrics_url(running) + f"?token={running.token}")
            assert in_url.status_code == 400
            posted = await http.post(metrics_url(running), headers={"Authorization": bearer})
            assert posted.status_code == 404
        # The unix socket has no /metrics (PROTOCOL §20.3: the TCP listener).
        transport = httpx.AsyncHTTPTransport(uds=str(short_dir / "bridge.sock"))
        async with httpx.AsyncClient(transport=transport) as http:
            on_unix = await http.get("http://localhost/metrics", headers={"Authorization": bearer})
            assert on_unix.status_code == 404


async def test_metrics_public_opens_the_door_but_not_the_host_check(short_dir: Path) -> None:
    async with daemon(short_dir, server=TCP + "metrics_public = true\n") as running:
        open_door = await scrape(running)
        assert open_door.status_code == 200
        samples, types = parse(open_door.text)
        assert types["oma_bridge_runs"] == "counter"
        assert of(samples, "oma_bridge_runs_in_flight") == 0
        rebound = await scrape(running, Host=f"evil.example:{running.port}")
        assert rebound.status_code == 403
        # A credential that is presented is still checked.
        assert (await scrape(running, Authorization="Bearer " + "0" * 64)).status_code == 401
