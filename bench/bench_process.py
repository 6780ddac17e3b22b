"""Process runs: ``Agent.run`` of a ``cat`` process agent against a bare spawn.

Every run pipes a 1 KB prompt through ``cat``.  In the same run, in
rounds whose order is shuffled each time, so a noisy neighbour hits every
contender alike:

* **baseline**: ``asyncio.create_subprocess_exec("cat", ...)`` with three
  pipes, then ``communicate(prompt)``: the least a Python caller can do;
* **oma-bridge**: ``Agent.run(prompt)`` with ``ProcessConfig(command="cat")``:
  the agent layer, the process backend, the supervisor (own session, stderr
  tail, the crash watchdog's registration, the group sweep at exit);
* **setpriv (info)**: the baseline spawning ``setpriv --pdeathsig KILL cat``,
  the cost an exec wrapper for ``PR_SET_PDEATHSIG`` would add to every run.

Reported: per-run milliseconds (median and best round) and their ratios to
the baseline's (target for oma-bridge: <= 1.15x).  On a shared machine the
best round is the steadier figure: a neighbour's burst only ever slows.  The
last column is the CPU time this process spends per run (median round:
``time.process_time``, the child's own time excluded), which a loaded
machine moves far less than the wall time: what the library itself costs.

With ``--under-load SECONDS`` the same rounds run while ``bench_load.py``
loads a daemon of its own for that long (200 streaming clients and 20
``cat`` clients, issue 30's target 5 "under the load of (3)"; its idle
phase and idle connections skipped): the rounds start 10 s after its load
has begun (its clients connect at once), the bench says whether they all
ended before the load did, and the load bench's own table follows (failed
runs, status round trips).

Run: ``.venv/bin/python bench/bench_process.py [--runs 500] [--rounds 20]
[--under-load SECONDS]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import anyio
from _util import machine, print_table

from oma_bridge import Agent
from oma_bridge.agent import AgentConfig
from oma_bridge.backends.process import ProcessConfig

PROMPT = ("0123456789abcdef" * 64)[:1024]
PROMPT_BYTES = PROMPT.encode()


async def bare(argv: list[str]) -> None:
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    stdout, _ = await process.communicate(PROMPT_BYTES)
    assert stdout == PROMPT_BYTES


def agent_run(agent: Agent) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        result = await agent.run(PROMPT)
        assert result.output == PROMPT, result.output

    return run


LOAD_SCRIPT = Path(__file__).with_name("bench_load.py")
#: How long the rounds wait once the load has begun.
SETTLE_S = 10.0


@contextlib.contextmanager
def background_load(seconds: float | None) -> Iterator[Callable[[], str]]:
    """``bench_load.py`` for ``seconds`` in a subprocess, its load begun; yields a status line.

    Without ``seconds``, nothing runs and the line is empty.  At the end of
    the block the load bench is waited for and its table printed.
    """
    if seconds is None:
        yield lambda: ""
        return
    with tempfile.TemporaryDirectory(prefix="omab-proc-load-") as folder:
        ready, out = Path(folder) / "ready", Path(folder) / "load.txt"
        command = [sys.executable, str(LOAD_SCRIPT), "--duration", str(seconds)]
        command += ["--idle", "0", "--idle-probe-s", "1", "--ready-file", str(ready)]
        with out.open("wb") as sink:
            load = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while not ready.exists():
                if load.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the load did not begin:\n{out.read_text()}")
                time.sleep(0.1)
            began = time.monotonic()
            # Its 220 clients connect at once when it begins: the rounds measure
            # the steady load that follows, as its status probe does.
            time.sleep(SETTLE_S)

            def state() -> str:
                elapsed = time.monotonic() - began
                under = load.poll() is None and elapsed < seconds
                return f"under load: rounds ended {elapsed:.0f} s into {seconds:g} s of " + (
                    "load (every round under it)" if under else "load: NOT all under it"
                )

            yield state
            load.wait(timeout=seconds + 300)
        finally:
            if load.poll() is None:
                load.terminate()
                load.wait()
        print("\n# the load (bench_load.py), meanwhile:\n" + out.read_text())


async def main(runs: int, rounds: int, under_load: float | None) -> None:
    agent = Agent(AgentConfig(name="cat", backend=ProcessConfig(command="cat")))
    contenders: list[tuple[str, Callable[[], Awaitable[None]]]] = [
        ("baseline: create_subprocess_exec + communicate", lambda: bare(["cat"])),
        ("oma-bridge: Agent.run, process backend", agent_run(agent)),
    ]
    setpriv = shutil.which("setpriv")
    if setpriv:
        wrapped = [setpriv, "--pdeathsig", "KILL", "cat"]
        contenders.append(("info: baseline through setpriv --pdeathsig", lambda: bare(wrapped)))
    per_round = max(1, runs // rounds)
    samples: list[list[float]] = [[] for _ in contenders]
    cpu: list[list[float]] = [[] for _ in contenders]
    for _, fn in contenders:
        for _ in range(20):
            await fn()  # warm-up: imports, the watchdog, the first allocations
    with background_load(under_load) as load_state:
        await measure(contenders, rounds, per_round, samples, cpu)
        report(contenders, samples, cpu, per_round * rounds, load_state())


async def measure(
    contenders: list[tuple[str, Callable[[], Awaitable[None]]]],
    rounds: int,
    per_round: int,
    samples: list[list[float]],
    cpu: list[list[float]],
) -> None:
    order = list(range(len(contenders)))
    shuffle = random.Random(0).shuffle
    for _ in range(rounds):
        # A new order each round: under load, a fixed place in the round
        # (right after a given neighbour) biased the medians by 20% and more.
        shuffle(order)
        for index in order:
            fn = contenders[index][1]
            start, cpu_start = time.perf_counter(), time.process_time()
            for _ in range(per_round):
                await fn()
            samples[index].append((time.perf_counter() - start) / per_round)
            cpu[index].append((time.process_time() - cpu_start) / per_round)


def report(
    contenders: list[tuple[str, Callable[[], Awaitable[None]]]],
    samples: list[list[float]],
    cpu: list[list[float]],
    total: int,
    under: str,
) -> None:
    base_median, base_best = statistics.median(samples[0]), min(samples[0])
    rows = []
    for (name, _), out, spent in zip(contenders, samples, cpu, strict=True):
        median, best = statistics.median(out), min(out)
        ratios = [f"{median / base_median:.2f}x", f"{best / base_best:.2f}x"]
        cpu_ms = f"{statistics.median(spent) * 1e3:.3f}"
        rows.append([name, f"{median * 1e3:.3f}", f"{best * 1e3:.3f}", *ratios, cpu_ms])
    print(
        f"{machine()}; {total} runs each of cat with a 1 KB prompt; "
        f"load average {os.getloadavg()[0]:.2f} at the end"
    )
    if under:
        print(under)
    print()
    headers = [
        "contender",
        "median ms/run",
        "best ms/run",
        "ratio (median)",
        "ratio (best)",
        "CPU ms/run (ours)",
    ]
    print_table(headers, rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--under-load", type=float, metavar="SECONDS")
    arguments = parser.parse_args()
    anyio.run(main, arguments.runs, arguments.rounds, arguments.under_load)
