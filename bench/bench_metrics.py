"""What recording the metrics (PROTOCOL §20.3) costs a run: the daemon with them against without.

Two daemons run side by side, each a subprocess of its own with the same
config: one with the recorder ``oma-bridge serve`` has
(:class:`~oma_bridge.server.metrics.Metrics`), one handed
:data:`~oma_bridge.server.metrics.NO_METRICS`, whose every call does
nothing (``bench/_metrics_daemon.py``).  The same client drives both, in
rounds that alternate (on, off, on, off, ...), so a noisy neighbour hits
both alike:

* **process run**: ``RemoteAgent.run`` of a 1 KB prompt on a ``cat``
  process profile (one spawn per run);
* **agent/stream**: ``RemoteAgent.stream`` of an echo llm agent answering a
  prompt of 500 words, one text event per word, each journaled and relayed:
  what a per-chunk cost would show in.

Reported per contender: milliseconds per run (median and best round), the
daemon's own CPU time per run (over all rounds, from ``/proc``, whose 10 ms
ticks a single round would not resolve: what the recorder adds is the
daemon's work, not the client's), and the ratios of ``on`` to ``off``.  A
last table times the recorder's one call per run in this process
(``Metrics.run_ended`` against ``NO_METRICS.run_ended``, and a ``/metrics``
render), the figure the run ratios cannot show below their noise.
``/metrics`` is scraped once a round on the ``on`` daemon, as Prometheus
would every 15 s, so the gauges are read too.

Run: ``.venv/bin/python bench/bench_metrics.py [--rounds 15] [--runs 40]``
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import orjson
import psutil
from _util import machine, print_table, time_interleaved

from oma_bridge.client import Client, RemoteAgent, connect
from oma_bridge.results import TokenUsage
from oma_bridge.server.metrics import NO_METRICS, Metrics

HERE = Path(__file__).resolve().parent
PROMPT = ("0123456789abcdef" * 64)[:1024]
WORDS = " ".join(f"w{n}" for n in range(500))

CONFIG = """
[server]
socket = "{folder}/bridge.sock"
tcp = "127.0.0.1:0"

[agents.catter]
kind = "process"
command = "cat"

[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"
"""


@dataclass
class Daemon:
    process: subprocess.Popen[bytes]
    folder: Path
    url: str
    token: str

    def cpu_s(self) -> float:
        times = psutil.Process(self.process.pid).cpu_times()
        return float(times.user + times.system)


@asynccontextmanager
async def daemon(mode: str) -> AsyncIterator[Daemon]:
    with tempfile.TemporaryDirectory(prefix=f"omab-metrics-{mode}-", dir="/tmp") as name:
        folder = Path(name)
        config = folder / "config.toml"
        config.write_text(CONFIG.replace("{folder}", str(folder)))
        command = [sys.executable, str(HERE / "_metrics_daemon.py"), str(config), mode]
        env = {**os.environ, "XDG_STATE_HOME": str(folder / "state")}
        process = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)  # noqa: ASYNC220
        try:
            discovery = folder / "bridge.json"
            with anyio.fail_after(20):
                while not discovery.exists():  # noqa: ASYNC110 - a file of another process
                    await anyio.sleep(0.01)
            data = orjson.loads(discovery.read_bytes())
            yield Daemon(process, folder, data["url"], data["token"])
        finally:
            process.send_signal(signal.SIGTERM)
            await anyio.to_thread.run_sync(process.wait, 20)


def process_run(agent: RemoteAgent) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        result = await agent.run(PROMPT)
        assert result.output.strip() == PROMPT, result.status

    return run


def stream_run(agent: RemoteAgent) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        events = 0
        stream = agent.stream(WORDS)
        async for event in stream:
            events += event.type == "text"
        assert stream.result is not None and stream.result.success, stream.result
        assert events >= 500, events

    return run


@dataclass
class Side:
    daemon: Daemon
    client: Client
    run: Callable[[], Awaitable[None]] | None = None


async def measure(side: Side, runs: int) -> tuple[float, float]:
    """Seconds per run and the daemon's CPU seconds per run, over ``runs`` runs."""
    assert side.run is not None
    cpu = side.daemon.cpu_s()
    start = time.perf_counter()
    for _ in range(runs):
        await side.run()
    return (time.perf_counter() - start) / runs, (side.daemon.cpu_s() - cpu) / runs


async def scrape(side: Side) -> None:
    port = side.daemon.url.rsplit(":", 1)[1].rstrip("/")
    async with httpx.AsyncClient() as http:
        answer = await http.get(
            f"http://127.0.0.1:{port}/metrics",
            headers={"Authorization": f"Bearer {side.daemon.token}"},
        )
    assert answer.status_code == 200, answer.status_code


async def main(rounds: int, runs: int) -> None:
    print(machine())
    print(f"load at start: {os.getloadavg()}")
    async with AsyncExitStack() as stack:
        sides: dict[str, Side] = {}
        for mode in ("on", "off"):
            found = await stack.enter_async_context(daemon(mode))
            socket = found.folder / "bridge.sock"
            client = await stack.enter_async_context(connect(socket=socket, token=found.token))
            sides[mode] = Side(found, client)
        rows = []
        for name, make, count in (
            ("process run (cat, 1 KB)", process_run, runs),
            ("agent/stream (echo, 500 text events)", stream_run, max(1, runs // 4)),
        ):
            for side in sides.values():
                profile = "catter" if make is process_run else "echo"
                side.run = make(await side.client.open(profile))
                for _ in range(3):
                    await side.run()  # warm-up: the first spawn, the first stream
            wall: dict[str, list[float]] = {"on": [], "off": []}
            cpu: dict[str, list[float]] = {"on": [], "off": []}
            for n in range(rounds):
                order = ("on", "off") if n % 2 == 0 else ("off", "on")
                for mode in order:
                    seconds, cpu_s = await measure(sides[mode], count)
                    wall[mode].append(seconds)
                    cpu[mode].append(cpu_s)
                await scrape(sides["on"])
            med = {mode: statistics.median(values) for mode, values in wall.items()}
            best = {mode: min(values) for mode, values in wall.items()}
            cpu_med = {mode: sum(values) / len(values) for mode, values in cpu.items()}
            for mode in ("off", "on"):
                rows.append(
                    [
                        f"{name}, metrics {mode}",
                        f"{med[mode] * 1e3:.2f}",
                        f"{best[mode] * 1e3:.2f}",
                        f"{cpu_med[mode] * 1e3:.2f}",
                        "1.00x" if mode == "off" else f"{med['on'] / med['off']:.3f}x",
                        "1.00x" if mode == "off" else f"{best['on'] / best['off']:.3f}x",
                        "1.00x" if mode == "off" else f"{cpu_med['on'] / cpu_med['off']:.3f}x",
                    ]
                )
    print_table(
        [
            "contender",
            "ms/run median",
            "ms/run best",
            "daemon CPU ms/run",
            "median ratio",
            "best ratio",
            "CPU ratio",
        ],
        rows,
    )
    recording()
    print(f"load at end: {os.getloadavg()}")


def recording() -> None:
    """The recorder's own call per run end, and one scrape's render, in microseconds."""
    metrics = Metrics()
    usage = TokenUsage(120, 480)
    for n in range(8):  # a few profiles' series, as a daemon would have
        metrics.run_ended(f"p{n}", "llm", "ok", 0.5, usage)

    def on() -> None:
        metrics.run_ended("p1", "llm", "ok", 0.5, usage)

    def off() -> None:
        NO_METRICS.run_ended("p1", "llm", "ok", 0.5, usage)

    on_t, off_t, render_t = time_interleaved([on, off, metrics.render])
    print_table(
        ["call", "us/call median", "us/call best"],
        [
            ["Metrics.run_ended (one run's end)", f"{on_t.median_us:.2f}", f"{on_t.best_us:.2f}"],
            ["NO_METRICS.run_ended", f"{off_t.median_us:.2f}", f"{off_t.best_us:.2f}"],
            ["Metrics.render (one scrape)", f"{render_t.median_us:.1f}", f"{render_t.best_us:.1f}"],
        ],
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=40, help="process runs per round")
    args = parser.parse_args()
    anyio.run(main, args.rounds, args.runs)
