"""What tracing costs (PROTOCOL §20.1): runs through the daemon with spans exported, against off.

Two ``oma-bridge serve`` daemons run side by side (subprocesses, as
``bench_daemon.py`` starts them): one without any ``OTEL_*`` variable
(tracing off: nothing of ``opentelemetry`` is imported), one with
``OTEL_EXPORTER_OTLP_ENDPOINT`` naming a local OTLP/HTTP receiver (a
subprocess that decodes every export with ``opentelemetry-proto`` and
counts its spans, as a collector would). In interleaved rounds, the same
client asks each daemon for:

* **agent/stream** of an llm agent against a local provider server
  (``bench_stream.py``'s, a subprocess answering every call with one model
  turn of ``--tokens`` token deltas in OpenAI's SSE format): the time from
  the request to the ``done`` event. Traced, a run makes an ``invoke_agent``
  and a ``chat`` span;
* **a process run** (``agent/run`` of ``cat``, a spawn per run): the time of
  the request. Traced, an ``invoke_agent`` span and ``TRACEPARENT`` in the
  child's environment;
* and, in this process, **the library's ``Agent.run``** of an ``echo`` llm
  agent (no network: the least work a run does, so what the spans add shows
  most), traced to the same receiver and off in alternate rounds (tracing
  switched with ``telemetry.reset()``): this process's CPU a run.

Reported: the median per-run wall time of each and the daemon's own CPU
time a run (its threads, the exporter's included; the steadier figure on a
shared machine), and the ratios traced/off (targets: at most 1.05 for the
stream, 1.10 for the process run). The
receiver's span count is checked against the runs made, so the traced
daemon did export what it was timed doing.

Run: ``.venv/bin/python bench/bench_tracing.py [--tokens 2000] [--runs 20] [--rounds 7]``
(needs the ``otel`` extra and ``opentelemetry-proto``: ``pip install -e '.[dev]'``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import psutil
from _util import machine, print_table
from bench_daemon import daemon

from oma_bridge.client import RemoteAgent, connect

PY = sys.executable
HERE = Path(__file__).resolve().parent
KEY_ENV = "OMA_BENCH_KEY"


# -- the receiver (runs in a child process) -----------------------------------------


def _receive() -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    answer = ExportTraceServiceResponse().SerializeToString()
    spans = [0]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            request = ExportTraceServiceRequest()
            request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
            spans[0] += sum(
                len(scope.spans) for rs in request.resource_spans for scope in rs.scope_spans
            )
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def do_GET(self) -> None:  # the span count so far
            body = str(spans[0]).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


def _child(argv: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    process = subprocess.Popen(argv, stdout=subprocess.PIPE)
    assert process.stdout is not None
    return process, int(process.stdout.readline().split()[0])


def _span_count(port: int) -> int:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/") as answer:
        return int(answer.read())


# -- the runs ---------------------------------------------------------------------

Run = Callable[[], Awaitable[float]]


def stream_run(agent: RemoteAgent, tokens: int) -> Run:
    async def run() -> float:
        started = time.perf_counter()
        deltas = 0
        async for event in agent.stream("go"):
            if event.type == "text":
                deltas += event.data.count(" ")
        elapsed = time.perf_counter() - started
        if deltas != tokens:
            raise RuntimeError(f"agent/stream: {deltas} deltas, not {tokens}")
        return elapsed

    return run


def process_run(agent: RemoteAgent) -> Run:
    async def run() -> float:
        started = time.perf_counter()
        result = await agent.run("ping")
        elapsed = time.perf_counter() - started
        if result.output != "ping":
            raise RuntimeError(f"the process run failed: {result.status}")
        return elapsed

    return run


async def library_runs(endpoint: str, runs: int, rounds: int) -> tuple[float, float]:
    """In-process ``Agent.run`` of the echo provider: this process's CPU a run, off and traced."""
    from oma_bridge import Agent, telemetry
    from oma_bridge.agent import AgentConfig

    cpu: dict[bool, list[float]] = {False: [], True: []}
    os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "1000"  # exports within the timed rounds, as above
    async with Agent(AgentConfig(name="echo", provider="echo", model="echo-1")) as agent:
        for number in range(rounds):
            for traced in (False, True) if number % 2 == 0 else (True, False):
                telemetry.reset()
                if traced:
                    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
                else:
                    os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
                await agent.run("warm up")
                started = time.process_time()
                for _ in range(runs):
                    await agent.run("hello there")
                cpu[traced].append((time.process_time() - started) / runs)
    telemetry.reset()  # what is buffered goes to the receiver, within the run's CPU
    os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    return statistics.median(cpu[False]), statistics.median(cpu[True])


def cpu_seconds(process: psutil.Process) -> float:
    """The daemon's own CPU (its threads, the exporter's included; not its children's).

    From ``/proc/<pid>/task/*/schedstat`` (nanoseconds on a CPU), where Linux has it:
    ``cpu_times()`` counts in clock ticks of 10 ms, too coarse for a run of a few ms.
    """
    total = 0
    try:
        for task in Path(f"/proc/{process.pid}/task").iterdir():
            with contextlib.suppress(OSError):  # a thread that just ended
                total += int((task / "schedstat").read_text().split()[0])
    except OSError:
        times = process.cpu_times()
        return float(times.user + times.system)
    return total / 1e9


async def measure(
    runs: dict[str, tuple[Run, psutil.Process]], per_round: int, rounds: int
) -> dict[str, tuple[float, float]]:
    """Per contender: the median per-run wall seconds and the daemon's mean CPU seconds a run.

    Rounds interleave the contenders, in reversed order every other round, so a busy
    neighbour or a slow spell of the machine hits all of them alike.  The daemon's CPU
    is the steadier figure on a shared machine: another process's work does not add to it.
    """
    walls: dict[str, list[float]] = {name: [] for name in runs}
    cpus: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for number in range(rounds):
        for name in names if number % 2 == 0 else names[::-1]:
            run, process = runs[name]
            before = cpu_seconds(process)
            walls[name].append(statistics.median([await run() for _ in range(per_round)]))
            cpus[name].append((cpu_seconds(process) - before) / per_round)
    return {name: (statistics.median(walls[name]), statistics.median(cpus[name])) for name in runs}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=20, help="runs of each kind per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--aa", action="store_true", help="both daemons untraced: the noise floor of the ratios"
    )
    args = parser.parse_args()
    os.environ[KEY_ENV] = "bench-key"
    provider, provider_port = _child(
        [PY, str(HERE / "bench_stream.py"), "--serve", str(args.tokens)]
    )
    receiver, receiver_port = _child([PY, __file__, "--receive"])
    agents = f"""
[agents.writer]
kind = "llm"
provider = "openai"
model = "m"
base_url = "http://127.0.0.1:{provider_port}/v1"
api_key_env = "{KEY_ENV}"
"""
    off_env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    on_env = (
        off_env
        if args.aa
        else {
            **off_env,
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver_port}",
            "OTEL_SERVICE_NAME": "oma-bridge-bench",
            # A batch a second (the default is every 5 s): the exports fall within the rounds.
            "OTEL_BSP_SCHEDULE_DELAY": "1000",
        }
    )
    try:
        async with (
            daemon(agents=agents, env=off_env) as off,
            daemon(agents=agents, env=on_env, tag="-traced") as on,
            connect(discovery_dir=off.folder) as off_client,
            connect(discovery_dir=on.folder) as on_client,
        ):
            contenders: dict[str, tuple[Run, psutil.Process]] = {}
            for label, client, served in (("off", off_client, off), ("traced", on_client, on)):
                writer, catter = await client.open("writer"), await client.open("catter")
                process = psutil.Process(served.process.pid)
                contenders[f"stream {label}"] = (stream_run(writer, args.tokens), process)
                contenders[f"process {label}"] = (process_run(catter), process)
            for run, _ in contenders.values():  # warm-up: imports, connections, the first spawn
                await run()
            medians = await measure(contenders, args.runs, args.rounds)
            # Every traced run's spans reach the receiver (a stream's 2, a process run's 1),
            # warm-up included, within the batch processor's delay.
            expected = 0 if args.aa else 3 * (1 + args.runs * args.rounds)
            with anyio.fail_after(30):
                while _span_count(receiver_port) < expected:  # noqa: ASYNC110 - another process
                    await anyio.sleep(0.2)
        library_off, library_on = await library_runs(
            f"http://127.0.0.1:{receiver_port}", 20 * args.runs, args.rounds
        )
        print(
            f"Tracing: {args.tokens:,}-delta agent/stream and a `cat` process run, "
            f"{args.runs} runs per round, median of {args.rounds} rounds"
        )
        print(f"machine: {machine()}")
        print(f"load: {os.getloadavg()}\n")
        rows = []
        for kind, target in (("stream", 1.05), ("process", 1.10)):
            (off_wall, off_cpu), (on_wall, on_cpu) = (
                medians[f"{kind} off"],
                medians[f"{kind} traced"],
            )
            rows.append(
                [
                    kind,
                    f"{off_wall * 1000:.2f}",
                    f"{on_wall * 1000:.2f}",
                    f"{on_wall / off_wall:.3f}",
                    f"{off_cpu * 1000:.2f}",
                    f"{on_cpu * 1000:.2f}",
                    f"{on_cpu / off_cpu:.3f}",
                    f"{target:.2f}",
                ]
            )
        header = ["run", "off (ms)", "traced (ms)", "wall ratio"]
        header += ["daemon CPU off (ms)", "traced (ms)", "CPU ratio", "target"]
        print_table(header, rows)
        print(
            f"\nlibrary Agent.run (echo, in-process): {library_off * 1e6:.0f} us CPU a run off, "
            f"{library_on * 1e6:.0f} us traced: {library_on / library_off:.2f}x "
            f"(+{(library_on - library_off) * 1e6:.0f} us for its invoke_agent and chat spans)"
        )
        print(f"\nspans received: {_span_count(receiver_port)} (at least {expected} expected)")
    finally:
        for child in (provider, receiver):
            child.terminate()
            child.wait()


if __name__ == "__main__":
    if sys.argv[1:] == ["--receive"]:
        _receive()
    else:
        anyio.run(main)
