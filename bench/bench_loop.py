"""The daemon on uvloop against the daemon on asyncio's loop, in one run (issue 30).

Two daemons side by side, ``[server] event_loop = "uvloop"`` and ``"asyncio"``,
measured by ``bench_daemon.py``'s own (a) ``daemon/status`` round trip (unix
socket and TCP), (b) ``cat`` run and (c) ACP relay, and with ``--facade`` by
``bench_acp_facade.py``'s (a) relay through ``oma-bridge acp`` (the same shim,
on its default loop, for both daemons).  The two daemons take turns, the
first of a turn swapped each repetition, so a noisy neighbour hits both
alike.  Two ratios per figure, uvloop over asyncio:

* ``raw``: the daemon's own figures (time per round trip or run, chunks/s);
* ``normalized``: each daemon's ratio to the baseline ``bench_daemon.py``
  measures with it in the same minutes (a bare websockets echo server, a bare
  spawn, the agent read directly), one over the other: the load of the
  machine while each daemon ran cancels out.

Below 1.00x is uvloop faster for (a) and (b) (time); above 1.00x for (c) and
the facade (throughput).

Run: ``.venv/bin/python bench/bench_loop.py [--repeats 3] [--rounds 5] [--chunks 5000] [--facade]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from _util import machine, print_table
from bench_acp_facade import daemon as facade_daemon
from bench_acp_facade import sdk_dir, throughput
from bench_daemon import Daemon, bench_acp_stream, bench_cat, bench_status, daemon

LOOPS = ("uvloop", "asyncio")

#: (label, unit, lower is faster) of each figure, in the order the calls give them.
FIGURES = [
    ("(a) daemon/status round trip, unix", "us", True),
    ("(a) daemon/status round trip, TCP", "us", True),
    ("(b) `cat` run (RemoteAgent.run)", "ms", True),
    ("(c) ACP text chunks/s, agent/stream", "/s", False),
]


def figure(text: str) -> float:
    """The number a ``bench_daemon.py`` figure starts with: ``"123 us"``, ``"4,567/s"``."""
    return float(text.split()[0].split("/")[0].replace(",", ""))


async def compare(repeats: int, rounds: int, chunks: int) -> list[list[str]]:
    # Each call and the rows of its result that are FIGURES (in order).
    calls: list[tuple[Callable[[Daemon], Awaitable[list[list[Any]]]], tuple[int, ...]]] = [
        (lambda d: bench_status(d, rounds), (0, 1)),  # unix and TCP; row 2 is a diagnostic
        (lambda d: bench_cat(d, rounds), (0,)),
        (lambda d: bench_acp_stream(d, rounds, chunks), (0,)),
    ]
    raw: dict[tuple[int, str], list[float]] = {}
    normalized: dict[tuple[int, str], list[float]] = {}
    async with (
        daemon(server='event_loop = "uvloop"') as uv,
        daemon(server='event_loop = "asyncio"') as plain,
    ):
        daemons = {"uvloop": uv, "asyncio": plain}
        for repeat in range(repeats):
            first = 0
            for call, wanted in calls:
                for loop in LOOPS if repeat % 2 == 0 else LOOPS[::-1]:
                    rows = await call(daemons[loop])
                    for offset, row_index in enumerate(wanted):
                        row = rows[row_index]
                        raw.setdefault((first + offset, loop), []).append(figure(row[1]))
                        normalized.setdefault((first + offset, loop), []).append(float(row[3]))
                first += len(wanted)
    table = []
    for index, (label, unit, is_time) in enumerate(FIGURES):
        uv_raw, as_raw = (statistics.median(raw[index, loop]) for loop in LOOPS)
        uv_norm, as_norm = (statistics.median(normalized[index, loop]) for loop in LOOPS)
        table.append(
            [
                label,
                f"{uv_raw:,.2f} {unit}",
                f"{as_raw:,.2f} {unit}",
                f"{uv_raw / as_raw:.2f}x",
                f"{uv_norm / as_norm:.2f}x",
                "lower is faster" if is_time else "higher is faster",
            ]
        )
    return table


def compare_facade(repeats: int, rounds: int, chunks: int) -> list[list[str]]:
    """``bench_acp_facade.py``'s (a): the shim's relay over each daemon, as a ratio to direct."""
    sdk = sdk_dir()
    ratios: dict[str, list[float]] = {loop: [] for loop in LOOPS}
    with contextlib.ExitStack() as stack:
        found = {
            loop: stack.enter_context(
                facade_daemon(sdk, persist=True, server=f'event_loop = "{loop}"')
            )
            for loop in LOOPS
        }
        for repeat in range(repeats):
            for loop in LOOPS if repeat % 2 == 0 else LOOPS[::-1]:
                rows = asyncio.run(throughput(found[loop], chunks, rounds))
                ratios[loop].append(float(str(rows[1][3]).rstrip("x")))  # the facade's row
    uv, plain = (statistics.median(ratios[loop]) for loop in LOOPS)
    return [
        [
            "facade (a): agent -> daemon -> shim -> client, ratio to direct",
            f"{uv:.2f}x",
            f"{plain:.2f}x",
            "",
            f"{uv / plain:.2f}x",
            "higher is faster",
        ]
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=3, help="turns of each daemon")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per turn")
    parser.add_argument("--chunks", type=int, default=5_000, help="chunks of a (c) turn")
    parser.add_argument("--facade", action="store_true", help="also bench_acp_facade.py's (a)")
    args = parser.parse_args()
    print(machine())
    print(f"load average at start: {os.getloadavg()}")
    rows = anyio.run(compare, args.repeats, args.rounds, args.chunks)
    if args.facade:
        rows += compare_facade(args.repeats, args.rounds, args.chunks)
    print(f"\n{args.repeats} turns per daemon, {args.rounds} rounds per turn\n")
    headers = ["measurement", "uvloop", "asyncio", "raw uvloop/asyncio", "normalized", ""]
    print_table(headers, rows)
    print(f"\nload average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
