"""The sandbox's price per process run: a sandboxed ``cat`` against an unsandboxed one.

Every run pipes a 1 KB prompt through ``cat`` with ``Agent.run``.  In the
same run, in rounds whose order is shuffled each time (a noisy neighbour
hits every contender alike):

* **baseline**: ``ProcessConfig(command="cat")``, no sandbox;
* **bwrap, network = true**: the same with ``sandbox = "bwrap"``: user, pid
  and ipc namespaces, the system bound read-only, a new ``/proc``, ``/dev``,
  ``/tmp`` and home folder, the folder bound read-write (``docs/isolation.md``);
* **bwrap, network = false**: a network namespace of its own besides;
* **info: bwrap alone**: ``create_subprocess_exec`` of the very argv the
  supervisor runs for the network = true case, ``communicate`` and nothing
  else: what bubblewrap itself costs, without the library.

Reported: per-run milliseconds (median and best round) and their ratios to
the baseline's (target for the sandboxed run: <= 1.3x, issue 26), and the
CPU time a run costs, ours and the children's (``getrusage``: bubblewrap's
processes and ``cat``, counted once reaped; median round), which a loaded
machine moves far less than the wall time.  bubblewrap's setup is a chain
of three processes handing over to each other (launcher, the sandbox's
init, the command), so on a loaded machine each hand-over waits for a CPU
and the wall time grows much faster than the CPU time.

Run: ``.venv/bin/python bench/bench_sandbox.py [--runs 400] [--rounds 20]``
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable

import anyio
from _util import machine, print_table
from bench_process import agent_run, bare

from oma_bridge import Agent
from oma_bridge.agent import AgentConfig
from oma_bridge.backends.process import ProcessConfig, default_supervisor
from oma_bridge.supervision.sandbox import Sandbox


async def main(runs: int, rounds: int) -> None:
    folder = tempfile.mkdtemp(prefix="oma-bench-sandbox-")
    plain = Agent(AgentConfig(name="cat", backend=ProcessConfig(command="cat", cwd=folder)))
    boxed, closed = (
        Agent(
            AgentConfig(
                name="cat",
                backend=ProcessConfig(command="cat", cwd=folder, sandbox="bwrap", network=network),
            )
        )
        for network in (True, False)
    )
    bubblewrap = default_supervisor().bubblewrap
    await bubblewrap.check(network=True)
    argv = bubblewrap.argv(["cat"], sandbox=Sandbox(folder=folder), cwd=folder)
    contenders: list[tuple[str, Callable[[], Awaitable[None]]]] = [
        ("baseline: Agent.run, cat, no sandbox", agent_run(plain)),
        ('Agent.run, cat, sandbox = "bwrap"', agent_run(boxed)),
        ('Agent.run, cat, sandbox = "bwrap", network = false', agent_run(closed)),
        ("info: bwrap alone (create_subprocess_exec of its argv)", lambda: bare(argv)),
    ]
    per_round = max(1, runs // rounds)
    samples: list[list[float]] = [[] for _ in contenders]
    cpu: list[list[float]] = [[] for _ in contenders]
    for _, fn in contenders:
        for _ in range(10):
            await fn()  # warm-up: imports, the watchdog, the probe
    order = list(range(len(contenders)))
    shuffle = random.Random(0).shuffle
    load_before = os.getloadavg()[0]
    for _ in range(rounds):
        shuffle(order)
        for index in order:
            fn = contenders[index][1]
            start, cpu_start = time.perf_counter(), _cpu()
            for _ in range(per_round):
                await fn()
            samples[index].append((time.perf_counter() - start) / per_round)
            cpu[index].append((_cpu() - cpu_start) / per_round)
    base_median, base_best = statistics.median(samples[0]), min(samples[0])
    rows = []
    base_cpu = statistics.median(cpu[0])
    for (name, _), out, spent in zip(contenders, samples, cpu, strict=True):
        median, best = statistics.median(out), min(out)
        ratios = [f"{median / base_median:.2f}x", f"{best / base_best:.2f}x"]
        cpu_ms = statistics.median(spent)
        cpu_cells = [f"{cpu_ms * 1e3:.3f}", f"{cpu_ms / base_cpu:.2f}x"]
        rows.append([name, f"{median * 1e3:.3f}", f"{best * 1e3:.3f}", *ratios, *cpu_cells])
    print(
        f"{machine()}; {per_round * rounds} runs each of cat with a 1 KB prompt; "
        f"load average {load_before:.2f} at the start, {os.getloadavg()[0]:.2f} at the end"
    )
    print()
    headers = [
        "contender",
        "median ms/run",
        "best ms/run",
        "ratio (median)",
        "ratio (best)",
        "CPU ms/run",
        "CPU ratio",
    ]
    print_table(headers, rows)


def _cpu() -> float:
    """CPU seconds so far: this process's and its reaped children's, user and system."""
    ours, theirs = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return ours.ru_utime + ours.ru_stime + theirs.ru_utime + theirs.ru_stime


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=20)
    arguments = parser.parse_args()
    anyio.run(main, arguments.runs, arguments.rounds)
