"""Redaction: what blanking the literal values of the keys adds to ``redact``.

``redact`` blanks the values of the key variables the process knows (some
25 names: the known provider variables, a daemon's profiles' ``api_key_env``
and ``pass_env``) and the token it holds, then applies the shape patterns.
The baseline is the same call with none of those variables set and no token
held (the variables are still looked up: that is the floor of the literal
pass, plus the patterns), timed in the same run in alternating rounds
(one ``_util.time_interleaved`` round each, alternating); the measured case has three keys set and a
token held, as a daemon with provider keys has.  Two texts: a status message
(a process agent's exit and a line of stderr, ~120 characters) and a 4 KiB
stderr tail.

``--compare-with DIR`` also times ``DIR/oma_bridge/redaction.py`` (another
checkout's, loaded from its file) on the same text in the same rounds, with
the keys set: what the change costs against the code before it.

Run: ``.venv/bin/python bench/bench_redaction.py [--rounds 15] [--compare-with DIR]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import secrets
import statistics
from collections.abc import Callable
from pathlib import Path

from _util import machine, print_table, time_interleaved

from oma_bridge.redaction import add_secrets, holding_secret, redact

KEYS = {name: secrets.token_urlsafe(30) for name in ("OPENAI_API_KEY", "GEMINI_API_KEY", "MY_KEY")}
STATUS = 'Process backend "wc" exited with code 1: wc: invalid option -- z; Try wc --help.'
TOKEN = secrets.token_hex(32)
TAIL = "\n".join(f"{n:05d} INFO worker: fetched page {n} in 12 ms (cache miss)" for n in range(80))


def other_redact(checkout: Path) -> Callable[[str], str]:
    """``redact`` of the ``redaction.py`` in another checkout."""
    spec = importlib.util.spec_from_file_location(
        "other_redaction", checkout / "oma_bridge" / "redaction.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    function: Callable[[str], str] = module.redact
    return function


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--compare-with", type=Path, default=None)
    args = parser.parse_args()
    rounds = args.rounds
    before = other_redact(args.compare_with) if args.compare_with else None
    print(f"# machine: {machine()}; load average {os.getloadavg()[0]:.2f} at the start")
    add_secrets(variables=["MY_KEY"])
    for name in KEYS:
        os.environ.pop(name, None)
    rows = []
    for label, text in (("status message", STATUS), ("4 KiB stderr tail", TAIL[:4096])):
        # The variables are the process's, so the cases alternate round by
        # round (one ``time_interleaved`` round each), not callable by callable.
        baseline: list[float] = []
        measured: list[float] = []
        earlier: list[float] = []
        call = [lambda text=text: redact(text)]
        for _ in range(rounds):
            baseline.append(time_interleaved(call, rounds=1)[0].best)
            os.environ.update(KEYS)
            with holding_secret(TOKEN):
                measured.append(time_interleaved(call, rounds=1)[0].best)
                if before is not None:
                    old = [lambda text=text: before(text)]
                    earlier.append(time_interleaved(old, rounds=1)[0].best)
            for name in KEYS:
                del os.environ[name]
        base, mine = statistics.median(baseline), statistics.median(measured)
        row = [
            label,
            f"{base * 1e6:.1f}",
            f"{mine * 1e6:.1f}",
            f"{mine / base:.2f}x",
            f"{min(measured) / min(baseline):.2f}x",
        ]
        if before is not None:
            then = statistics.median(earlier)
            row += [f"{then * 1e6:.1f}", f"{mine / then:.2f}x"]
        rows.append(row)
    headers = ["text", "none set (µs)", "3 keys + token (µs)", "ratio (median)", "ratio (best)"]
    if before is not None:
        headers += ["before (µs)", "vs before (median)"]
    print_table(headers, rows)


if __name__ == "__main__":
    main()
