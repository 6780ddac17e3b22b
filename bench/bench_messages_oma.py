"""Guard + copy against the TypeScript reference, open-multi-agent, in one run (issue 30, 6).

``bench_messages.py`` compares ``checked_copy`` with ``copy.deepcopy``; this
script compares it with what OMA pays for the same input:
``prepareAgentRunInput(messages)`` of ``packages/core/src/agent/input.ts``
(``assertValidMessages`` then ``structuredClone``), run by Node.js through
the checkout's own ``tsx``.  The reference is not a dependency of this
project and nothing of it is copied here: ``--oma DIR`` names a checkout of
``open-multi-agent/open-multi-agent`` on which ``npm install`` has been run
(see docs/benchmarks.md for the commit measured).

The Node process is started once and kept; rounds alternate (ours, then the
reference's, case by case), each side with its own loop count calibrated so
that a round lasts at least 20 ms, and each side's per-call time is the
round's loop time divided by its count, as ``_util.time_interleaved`` does.
The inputs are ``bench_messages.py``'s, written once as JSON for Node.  For
the first sight of the 1 MiB image ours sees a new image string every call
(the full base64 scan, no memo); the reference has no memo, so each of its
calls is a first sight.

Run: ``.venv/bin/python bench/bench_messages_oma.py --oma /path/to/open-multi-agent [--rounds 15]``
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from _util import calibrate, loop_seconds, machine, print_table
from bench_messages import conversation, distinct_images, image_source

from oma_bridge.messages import checked_copy

#: The reference's side: one round of ``prepareAgentRunInput`` per line read.
NODE_ROUNDS = """
import { readFileSync } from 'node:fs'
import { createInterface } from 'node:readline'

const [inputsPath, omaDir] = process.argv.slice(2)
const { prepareAgentRunInput } = await import(`${omaDir}/packages/core/src/agent/input.ts`)
const inputs = JSON.parse(readFileSync(inputsPath, 'utf8'))
const loops = new Map()

function loopSeconds(fn, n) {
  const start = performance.now()
  for (let i = 0; i < n; i++) fn()
  return (performance.now() - start) / 1000
}

function calibrate(fn) {
  for (let n = 1; ; n *= 10) {
    for (const f of [1, 2, 5]) if (loopSeconds(fn, n * f) >= 0.02) return n * f
  }
}

for await (const line of createInterface({ input: process.stdin })) {
  const messages = inputs[line.trim()]
  const fn = () => prepareAgentRunInput(messages)
  if (!loops.has(line)) {
    fn()
    loops.set(line, calibrate(fn))
  }
  const n = loops.get(line)
  console.log(JSON.stringify(loopSeconds(fn, n) / n))
}
"""


class Reference:
    """The Node process that times the reference, a round per request."""

    def __init__(self, oma: Path, inputs: dict[str, list[dict[str, Any]]], folder: Path) -> None:
        tsx = oma / "node_modules" / ".bin" / "tsx"
        if not tsx.exists():
            raise SystemExit(f"{tsx} is missing: run `npm install` in {oma} first")
        script, data = folder / "rounds.mts", folder / "inputs.json"
        script.write_text(NODE_ROUNDS)
        data.write_bytes(orjson.dumps(inputs))
        self.process = subprocess.Popen(
            [str(tsx), str(script), str(data), str(oma.resolve())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def round(self, name: str) -> float:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(name + "\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=10)


def ours(messages: list[dict[str, Any]], fresh_image: bool) -> Callable[[], object]:
    if not fresh_image:
        return lambda: checked_copy(messages)
    source = image_source(messages)
    pool = distinct_images(source["data"], 64)
    turn = itertools.count()

    def first_sight() -> object:
        source["data"] = pool[next(turn) % len(pool)]
        return checked_copy(messages)

    return first_sight


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--oma", type=Path, required=True, help="an open-multi-agent checkout")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    cases = [
        ("1,000 messages + 1 MB image, seen before", conversation(1000, 1 << 20), False),
        ("1,000 messages + 1 MB image, first sight", conversation(1000, 1 << 20), True),
        ("50-message chat", conversation(50, 0), False),
    ]
    rows = []
    with tempfile.TemporaryDirectory(prefix="omab-bench-oma-") as name:
        reference = Reference(args.oma, {case: m for case, m, _ in cases}, Path(name))
        try:
            for case, messages, fresh in cases:
                fn = ours(messages, fresh)
                fn()
                number = calibrate(fn, 0.02)
                mine, theirs = [], []
                for _ in range(args.rounds):
                    mine.append(loop_seconds(fn, number) / number)
                    theirs.append(reference.round(case))
                a, b = statistics.median(mine), statistics.median(theirs)
                rows.append(
                    [
                        case,
                        f"{a * 1e6:,.1f}",
                        f"{b * 1e6:,.1f}",
                        f"{a / b:.2f}x",
                        f"{min(mine) / min(theirs):.2f}x",
                        "< 1.00x" + ("" if a < b else " (missed)"),
                    ]
                )
        finally:
            reference.close()
    print(f"# machine: {machine()}; load average {os.getloadavg()[0]:.2f} at the start")
    print(f"# {args.rounds} alternating rounds, per call; ours gc off during a round")
    headers = ["case", "ours (µs)", "OMA (µs)", "ratio (median)", "ratio (best)", "target"]
    print_table(headers, rows)


if __name__ == "__main__":
    main()
