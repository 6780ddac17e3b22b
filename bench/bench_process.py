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

Run: ``.venv/bin/python bench/bench_process.py [--runs 500] [--rounds 20]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable

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


async def main(runs: int, rounds: int) -> None:
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
    base_median, base_best = statistics.median(samples[0]), min(samples[0])
    rows = []
    for (name, _), out, spent in zip(contenders, samples, cpu, strict=True):
        median, best = statistics.median(out), min(out)
        ratios = [f"{median / base_median:.2f}x", f"{best / base_best:.2f}x"]
        cpu_ms = f"{statistics.median(spent) * 1e3:.3f}"
        rows.append([name, f"{median * 1e3:.3f}", f"{best * 1e3:.3f}", *ratios, cpu_ms])
    print(
        f"{machine()}; {per_round * rounds} runs each of cat with a 1 KB prompt; "
        f"load average {os.getloadavg()[0]:.2f} at the end"
    )
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
    arguments = parser.parse_args()
    anyio.run(main, arguments.runs, arguments.rounds)
