"""The daemon under load: 200 streaming clients and 20 process clients at once, then 1,000 idle.

A real daemon (``oma-bridge serve --config F``, a subprocess, its runtime
and state folders its own) serves ``echo`` (the offline LLM provider) and
``catter`` (``cat`` as a process agent).  Over its unix socket, with raw
``websockets`` clients (``orjson``, one request at a time each, so the
bench's own work per frame stays small):

1. **idle**: a probe measures ``daemon/status`` round trips, one every
   50 ms, before any load;
2. **load** (``--duration`` seconds, 60 by default): ``--streamers`` clients
   (200) connect at once and each runs ``agent/stream`` of a 200-word prompt
   in a loop, counting the ``run/event`` notifications; ``--catters``
   clients (20) run ``agent/run`` of a ``cat`` agent in a loop; a new probe
   measures throughout.  Every run must succeed with its prompt as output;
3. **idle connections**: ``--idle`` connections (1,000) connect and
   ``initialize``, and stay; the daemon's RSS before and after gives the
   memory per connection.

The probe is a process of its own (``bench/_status_probe.py``: one
connection, ``initialize``, then one ``daemon/status`` at a time, its round
trips reported as JSON at the end), as a status client is (``oma-bridge
status``, an editor, the status page).  Until 2026-12-01 14:38 UTC
(docs/benchmarks.md, "Load") the probe ran in this process's event loop,
beside the 220 load clients, so its round trips also counted its wait
behind their frames in that loop; ``--in-loop-probe`` measures that way
too, in the same run, for comparison.

The daemon's RSS and CPU are sampled every second (psutil).  Verdicts:
p99 of the status round trip under load at most 10x the idle p99; no
failed run; RSS flat after warm-up (the load's samples cut in thirds, the
first is warm-up: the last third's median within max(5 MB, 10%) of the
second third's, the rule of ``bench/soak.py``).

The bench raises its own open-file limit (the daemon inherits it): the
idle phase holds more than a thousand sockets on each side.  The config caps
each agent's journal at 250 entries (one stream), so that journals are full
after the warm-up; ``--profile FILE`` runs the daemon under cProfile and
prints where its time went.

Run: ``.venv/bin/python bench/bench_load.py [--duration 60] [--streamers 200]
[--catters 20] [--idle 1000] [--profile FILE] [--in-loop-probe] [--ready-file FILE]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import pstats
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psutil
from _util import machine, print_table
from websockets.asyncio.client import ClientConnection, unix_connect

PY = sys.executable
WORDS = " ".join(f"word{i}" for i in range(200))
CAT_PROMPT = ("0123456789abcdef" * 64)[:1024]
PROBE_EVERY_S = 0.05
PROBE_SCRIPT = Path(__file__).with_name("_status_probe.py")
SAMPLE_EVERY_S = 1.0

CONFIG = """
[server]
socket = "{folder}/bridge.sock"
max_connections = {connections}
max_concurrent_runs = {runs}
max_queued_runs = {runs}
# One stream's worth of entries (a stream is ~203: its start, 201 events, its
# end), so that every journal reaches its cap within the warm-up.  With the
# default (10,000 per agent) the journals fill for ten minutes at this rate,
# and RSS grows by design until they do.
journal_max_events = 250

[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"

[agents.catter]
kind = "process"
command = "cat"
"""


@dataclass
class Daemon:
    process: subprocess.Popen[bytes]
    socket: str
    token: str

    @property
    def psutil(self) -> psutil.Process:
        return psutil.Process(self.process.pid)


@contextlib.contextmanager
def daemon(
    folder: Path, connections: int, runs: int, profile: Path | None = None
) -> Iterator[Daemon]:
    config = folder / "config.toml"
    config.write_text(CONFIG.format(folder=folder, connections=connections, runs=runs))
    env = {
        **os.environ,
        "XDG_RUNTIME_DIR": str(folder / "run"),
        "XDG_STATE_HOME": str(folder / "state"),
    }
    (folder / "run").mkdir(mode=0o700)
    command = [PY, "-m", "oma_bridge.cli", "serve", "--config", str(config)]
    if profile is not None:
        command = [PY, "-m", "cProfile", "-o", str(profile), *command[1:]]
    process = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    try:
        discovery = folder / "bridge.json"
        deadline = time.monotonic() + 30
        while not discovery.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the daemon did not start")
            time.sleep(0.01)
        data = orjson.loads(discovery.read_bytes())
        yield Daemon(process, data["socket"], data["token"])
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


class Client:
    """One raw connection: requests one at a time, notifications counted on the way."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self._ids = iter(range(1, 1 << 62))

    async def call(self, method: str, params: Any = None) -> tuple[dict[str, Any], int]:
        """The answer to one request, and how many ``run/event`` frames came before it."""
        request_id = next(self._ids)
        request = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        await self.ws.send(orjson.dumps(request).decode())
        events = 0
        while True:
            frame = await self.ws.recv()
            if '"method":"run/event"' in frame:  # the hot path: counted, not parsed
                events += 1
                continue
            message = orjson.loads(frame)
            if message.get("id") == request_id:
                return message, events


@contextlib.asynccontextmanager
async def connected(d: Daemon, name: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {d.token}"}
    async with unix_connect(
        d.socket,
        "ws://localhost/",
        additional_headers=headers,
        compression=None,
        max_size=None,
        open_timeout=60,  # 220 handshakes at once on a busy daemon: judged, not timed out
    ) as ws:
        client = Client(ws)
        info = {"name": name, "version": "0"}
        answer, _ = await client.call("initialize", {"protocolVersion": 1, "clientInfo": info})
        assert "result" in answer, answer
        yield client


@dataclass
class Tally:
    runs: int = 0
    events: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)

    def fail(self, what: str) -> None:
        self.failed += 1
        if len(self.failures) < 5:
            self.failures.append(what)


async def run_loop(
    d: Daemon, profile: str, method: str, prompt: str, until: float, tally: Tally
) -> None:
    try:
        async with connected(d, f"load-{profile}") as client:
            answer, _ = await client.call("agent/open", {"profile": profile})
            agent = answer["result"]["agentId"]
            while time.monotonic() < until:
                params = {"agentId": agent, "input": prompt, "runId": os.urandom(16).hex()}
                answer, events = await client.call(method, params)
                result = answer.get("result")
                if result is None or not result.get("success") or result["output"] != prompt:
                    tally.fail(str(answer)[:300])
                else:
                    tally.runs += 1
                    tally.events += events
    except Exception as error:  # a refused or dropped connection is a failure too
        tally.fail(f"{type(error).__name__}: {error}")


@contextlib.asynccontextmanager
async def probe_process(d: Daemon) -> AsyncIterator[list[float]]:
    """``daemon/status`` round trips measured by ``_status_probe.py``, a process of its own.

    Measuring from when it said ``ready`` (connected, initialized) until the
    block ends; the list is filled when the block ends (its stdin closed).
    """
    child = await asyncio.create_subprocess_exec(
        PY,
        str(PROBE_SCRIPT),
        d.socket,
        d.token,
        str(PROBE_EVERY_S),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None
    samples: list[float] = []
    try:
        ready = await child.stdout.readline()
        if ready != b"ready\n":
            raise SystemExit(f"the status probe did not start: {ready!r}")
        yield samples
        child.stdin.close()
        line = await child.stdout.readline()
        samples.extend(orjson.loads(line)["samples"])
    finally:
        if child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.stdin.close()
            try:
                await asyncio.wait_for(child.wait(), 10)
            except TimeoutError:
                child.kill()
                await child.wait()


async def probe(d: Daemon, stop: asyncio.Event, samples: list[float]) -> None:
    """``daemon/status`` round trips on one connection of the bench's own loop.

    The method of the runs until 2026-12-01, 14:38 UTC (``--in-loop-probe``
    shows it beside the probe process): its round trips include the wait
    behind the load clients' frames in this loop.
    """
    async with connected(d, "probe") as client:
        while not stop.is_set():
            start = time.perf_counter()
            answer, _ = await client.call("daemon/status", {})
            samples.append(time.perf_counter() - start)
            assert "result" in answer, answer
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), PROBE_EVERY_S)


async def sample_daemon(d: Daemon, stop: asyncio.Event, rss: list[int], cpu: list[float]) -> None:
    process = d.psutil
    while not stop.is_set():
        rss.append(process.memory_info().rss)
        times = process.cpu_times()
        cpu.append(times.user + times.system)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SAMPLE_EVERY_S)


def quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def flat(rss: list[int]) -> tuple[float, float, bool]:
    """(second third's median, last third's median, flat?) of the load's RSS samples (MB)."""
    third = len(rss) // 3
    second = statistics.median(rss[third : 2 * third]) / 1e6
    last = statistics.median(rss[2 * third :]) / 1e6
    return second, last, last - second <= max(5.0, 0.1 * second)


async def idle_connections(d: Daemon, count: int) -> tuple[float, float]:
    """Daemon RSS (MB) before and after ``count`` idle, initialized connections."""
    process = d.psutil
    await asyncio.sleep(2)
    before = process.memory_info().rss
    async with contextlib.AsyncExitStack() as stack:
        for start in range(0, count, 50):  # in batches: a thousand handshakes at once time out
            batch = [connected(d, "idle") for _ in range(start, min(count, start + 50))]
            await asyncio.gather(*(stack.enter_async_context(c) for c in batch))
        await asyncio.sleep(2)
        after = process.memory_info().rss
    return before / 1e6, after / 1e6


async def main(args: argparse.Namespace) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2 * args.idle + 4 * (args.streamers + args.catters) + 256
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, wanted)), hard))
    connections = args.idle + args.streamers + args.catters + 16
    runs = args.streamers + args.catters + 16
    load_average = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="omab-load-", dir="/tmp") as name:
        folder = Path(name)
        with daemon(folder, connections, runs, args.profile) as d:
            stop_probe, stop_sampling = asyncio.Event(), asyncio.Event()
            idle_loop_rtt: list[float] = []
            async with probe_process(d) as idle_rtt:
                if args.in_loop_probe:
                    probing = asyncio.create_task(probe(d, stop_probe, idle_loop_rtt))
                await asyncio.sleep(args.idle_probe_s)
                if args.in_loop_probe:
                    stop_probe.set()
                    await probing

            stop_probe = asyncio.Event()
            load_loop_rtt: list[float] = []
            rss: list[int] = []
            cpu: list[float] = []
            streams, cats = Tally(), Tally()
            me = psutil.Process()
            my_cpu_before = sum(me.cpu_times()[:2])
            async with probe_process(d) as load_rtt:
                started = time.monotonic()
                if args.ready_file is not None:  # for a bench that measures under this load
                    args.ready_file.write_text(f"{started}\n")
                until = started + args.duration
                sampling = asyncio.create_task(sample_daemon(d, stop_sampling, rss, cpu))
                if args.in_loop_probe:
                    probing = asyncio.create_task(probe(d, stop_probe, load_loop_rtt))
                await asyncio.gather(
                    *(
                        run_loop(d, "echo", "agent/stream", WORDS, until, streams)
                        for _ in range(args.streamers)
                    ),
                    *(
                        run_loop(d, "catter", "agent/run", CAT_PROMPT, until, cats)
                        for _ in range(args.catters)
                    ),
                )
                elapsed = time.monotonic() - started
                stop_probe.set()
                stop_sampling.set()
                await asyncio.gather(sampling, *([probing] if args.in_loop_probe else []))
            my_cpu = sum(me.cpu_times()[:2]) - my_cpu_before
            before, after = await idle_connections(d, args.idle) if args.idle else (0.0, 0.0)

    idle_p50, idle_p99 = quantile(idle_rtt, 0.5), quantile(idle_rtt, 0.99)
    load_p50, load_p99 = quantile(load_rtt, 0.5), quantile(load_rtt, 0.99)
    second, last, is_flat = flat(rss)
    daemon_cpu = (cpu[-1] - cpu[0]) / max(1e-9, len(cpu) - 1) / SAMPLE_EVERY_S
    failed = streams.failed + cats.failed
    print(f"# {machine()}; load average {load_average:.2f} at the start")
    print(
        f"# {args.duration:g} s of load: {args.streamers} clients streaming echo "
        f"(200 words), {args.catters} clients running cat (1 KB); probe every "
        f"{PROBE_EVERY_S * 1e3:.0f} ms; {args.idle} idle connections after"
    )
    print()
    rows = [
        ["echo streams/s (agent/stream, 200 words)", f"{streams.runs / elapsed:,.1f}", "", "-"],
        ["run/event notifications/s", f"{streams.events / elapsed:,.0f}", "", "-"],
        ["cat runs/s (agent/run)", f"{cats.runs / elapsed:,.1f}", "", "-"],
        [
            "failed runs",
            f"{failed}",
            f"of {streams.runs + cats.runs + failed:,}",
            "0: " + ("yes" if failed == 0 else "NO"),
        ],
        [
            "daemon/status round trip p50",
            f"{load_p50 * 1e3:.2f} ms",
            f"idle {idle_p50 * 1e3:.2f} ms ({load_p50 / idle_p50:.1f}x)",
            "-",
        ],
        [
            "daemon/status round trip p99",
            f"{load_p99 * 1e3:.2f} ms",
            f"idle {idle_p99 * 1e3:.2f} ms ({load_p99 / idle_p99:.1f}x)",
            "<= 10x: " + ("yes" if load_p99 <= 10 * idle_p99 else "NO"),
        ],
        *(
            [
                [
                    f"status round trip p{q}, probe in the bench's loop",
                    f"{quantile(load_loop_rtt, q / 100) * 1e3:.2f} ms",
                    f"idle {quantile(idle_loop_rtt, q / 100) * 1e3:.2f} ms "
                    f"({quantile(load_loop_rtt, q / 100) / quantile(idle_loop_rtt, q / 100):.1f}x)",
                    "(the method before)",
                ]
                for q in (50, 99)
            ]
            if args.in_loop_probe
            else []
        ),
        [
            "daemon RSS under load (min / median / max)",
            f"{min(rss) / 1e6:.1f} / {statistics.median(rss) / 1e6:.1f} / {max(rss) / 1e6:.1f} MB",
            f"2nd third {second:.1f}, last third {last:.1f} MB",
            "flat: " + ("yes" if is_flat else "NO"),
        ],
        ["daemon CPU under load", f"{daemon_cpu * 100:.0f}% of a core", "", "-"],
        ["bench process CPU (the clients)", f"{my_cpu / elapsed * 100:.0f}% of a core", "", "-"],
    ]
    if args.idle:
        per = (after - before) * 1e6 / args.idle
        rows.append(
            [
                f"daemon RSS per idle connection ({args.idle:,})",
                f"{per / 1024:.1f} KiB",
                f"{before:.1f} -> {after:.1f} MB",
                "-",
            ]
        )
    print_table(["measure", "value", "against", "target"], rows)
    print(
        f"\n# probe samples: {len(idle_rtt)} idle, {len(load_rtt)} under load"
        + (
            f" (in the bench's loop: {len(idle_loop_rtt)}, {len(load_loop_rtt)})"
            if args.in_loop_probe
            else ""
        )
        + "; "
        f"RSS samples: {len(rss)}"
    )
    for what in streams.failures + cats.failures:
        print(f"# failure: {what}")
    if args.profile is not None:
        print(f"\n# the daemon's profile ({args.profile}), by internal time:")
        pstats.Stats(str(args.profile)).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--streamers", type=int, default=200)
    parser.add_argument("--catters", type=int, default=20)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--idle-probe-s", type=float, default=6.0)
    parser.add_argument("--profile", type=Path, metavar="FILE")
    parser.add_argument(
        "--ready-file",
        type=Path,
        metavar="FILE",
        help="written when the load begins (bench_process.py --under-load waits for it)",
    )
    parser.add_argument(
        "--in-loop-probe",
        action="store_true",
        help="also measure with a probe in the bench's own loop (the method before)",
    )
    asyncio.run(main(parser.parse_args()))
