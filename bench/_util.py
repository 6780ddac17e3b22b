"""Small helpers shared by the benchmark scripts: timing and a table printer.

A bench script runs as ``.venv/bin/python bench/bench_X.py``, so this folder is
on ``sys.path`` and ``from _util import ...`` works without a package.

* :func:`time_interleaved` times several callables in alternating rounds (A, B,
  A, B, ...), so a slow phase of the machine (a noisy neighbour, a frequency
  change) hits every contender alike.  Each round runs a callable ``number``
  times in a loop with the garbage collector off, as :mod:`timeit` does; the
  per-call time of a round is the loop time divided by ``number``.  The result
  keeps the best round and the median round.
* :func:`print_table` prints rows under a header, columns aligned, in the
  Markdown pipe format, so a table can be pasted into ``docs/benchmarks.md``
  as printed.
* :func:`machine` describes the machine for the same document.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Timing", "calibrate", "loop_seconds", "machine", "print_table", "time_interleaved"]


@dataclass(frozen=True)
class Timing:
    """Per-call seconds of one callable over its rounds."""

    best: float
    median: float

    @property
    def best_us(self) -> float:
        return self.best * 1e6

    @property
    def median_us(self) -> float:
        return self.median * 1e6


def loop_seconds(fn: Callable[[], object], number: int) -> float:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        return time.perf_counter() - start
    finally:
        if was_enabled:
            gc.enable()


def calibrate(fn: Callable[[], object], min_round_s: float) -> int:
    """The smallest loop count of the form 1, 2, 5, 10, 20, ... filling ``min_round_s``."""
    number = 1
    while True:
        for factor in (1, 2, 5):
            if loop_seconds(fn, number * factor) >= min_round_s:
                return number * factor
        number *= 10


def time_interleaved(
    fns: Sequence[Callable[[], object]], *, rounds: int = 15, min_round_s: float = 0.02
) -> list[Timing]:
    """Time each callable over ``rounds`` alternating rounds; one :class:`Timing` each.

    Every callable gets its own loop count, calibrated (after a warm-up call)
    so that one round lasts at least ``min_round_s``.
    """
    for fn in fns:
        fn()  # warm-up: imports, caches, first allocations
    numbers = [calibrate(fn, min_round_s) for fn in fns]
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for fn, number, out in zip(fns, numbers, samples, strict=True):
            out.append(loop_seconds(fn, number) / number)
    return [Timing(best=min(s), median=statistics.median(s)) for s in samples]


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print a Markdown pipe table; numbers right-aligned, text left-aligned."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[k]) for row in cells) for k in range(len(headers))]
    numeric = [
        all(_is_number(row[k]) for row in cells[1:]) and len(cells) > 1 for k in range(len(headers))
    ]

    def line(row: Sequence[str]) -> str:
        padded = (
            c.rjust(w) if num else c.ljust(w)
            for c, w, num in zip(row, widths, numeric, strict=True)
        )
        return "| " + " | ".join(padded) + " |"

    print(line(cells[0]))
    print(
        "|"
        + "|".join(
            ("-" * (w + 1) + ":") if n else "-" * (w + 2)
            for w, n in zip(widths, numeric, strict=True)
        )
        + "|"
    )
    for row in cells[1:]:
        print(line(row))


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", "").rstrip("x"))
    except ValueError:
        return False
    return True


def installed_environment() -> dict[str, str]:
    """This process's environment for the processes a bench times whole, bytecode cached.

    An install has its bytecode (an editable one writes it at the first
    import); a shell with ``PYTHONDONTWRITEBYTECODE`` set would have every
    timed process compile oma_bridge anew (docs/benchmarks.md, "The machine").
    """
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def machine() -> str:
    """One line: core count, CPU model and Python version."""
    model = "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for row in cpuinfo.read_text().splitlines():
            if row.startswith("model name"):
                model = row.split(":", 1)[1].strip()
                break
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"{cores} cores ({model}), {platform.python_implementation()} {platform.python_version()}"
    )
