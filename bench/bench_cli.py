"""The command line's start: whole processes against bare websockets scripts.

A daemon (``oma-bridge serve --config F``, a subprocess, in a runtime folder
of its own) serves the ``echo`` profile.  Every contender is a new process,
timed from its spawn, in rounds whose order is shuffled each time (so a
noisy neighbour hits every contender alike), as a hyperfine-style loop does:

* **run**: ``oma-bridge run echo hi`` (the console script), to its exit,
  against a bare script that reads the discovery file, connects with
  ``websockets``, sends ``initialize``, ``agent/open``, ``agent/run`` and
  ``agent/close`` (what the command line sends), prints the output and
  exits; target <= 1.3x (issue 30);
* **acp**: ``oma-bridge acp echo`` (the stdio shim), from its spawn to the
  answer of an ``initialize`` written on its stdin, against a bare script
  that connects to ``/acp/echo`` and sends one ``initialize``, to the same
  answer on its stdout; target <= 1.2x;
* **python -c pass** (info): the interpreter's own start.

Reported: per-process milliseconds, median and best round, and the ratios to
the baseline's.  ``--importtime`` adds the modules the ``run`` command
imports beyond the bare script's, by median self time.  ``--compare-with DIR``
adds the same two commands run from another checkout's ``oma_bridge`` (a
folder holding the package, first on ``PYTHONPATH``), in the same rounds:
a before/after in one run.

Run: ``.venv/bin/python bench/bench_cli.py [--rounds 20] [--per-round 3] [--importtime]
[--compare-with DIR]``
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from _util import installed_environment, machine, print_table

PY = sys.executable
CLI = str(Path(PY).with_name("oma-bridge"))

CONFIG = """
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"
"""

#: What a plain Python caller writes to run an agent once: stdlib + websockets.
BARE_RUN = """
import asyncio, json, os, sys
from websockets.asyncio.client import unix_connect

async def main():
    path = os.path.join(os.environ["XDG_RUNTIME_DIR"], "oma-bridge", "bridge.json")
    with open(path) as file:
        found = json.load(file)
    headers = {"Authorization": "Bearer " + found["token"]}
    async with unix_connect(
        found["socket"], "ws://localhost/", additional_headers=headers, compression=None
    ) as ws:
        async def call(id, method, params):
            request = {"jsonrpc": "2.0", "id": id, "method": method, "params": params}
            await ws.send(json.dumps(request))
            while True:
                answer = json.loads(await ws.recv())
                if answer.get("id") == id:
                    return answer["result"]

        info = {"name": "bare", "version": "0"}
        await call(1, "initialize", {"protocolVersion": 1, "clientInfo": info})
        agent = (await call(2, "agent/open", {"profile": "echo"}))["agentId"]
        params = {"agentId": agent, "input": sys.argv[1], "runId": os.urandom(16).hex()}
        print((await call(3, "agent/run", params))["output"])
        await call(4, "agent/close", {"agentId": agent})

asyncio.run(main())
"""

ACP_INITIALIZE = (
    '{"jsonrpc":"2.0","id":1,"method":"initialize",'
    '"params":{"protocolVersion":1,"clientCapabilities":{}}}'
)

#: One ACP request to the daemon's ``/acp/<profile>``, its answer printed.
BARE_ACP = f"""
import asyncio, json, os
from websockets.asyncio.client import unix_connect

async def main():
    path = os.path.join(os.environ["XDG_RUNTIME_DIR"], "oma-bridge", "bridge.json")
    with open(path) as file:
        found = json.load(file)
    headers = {{"Authorization": "Bearer " + found["token"]}}
    async with unix_connect(
        found["socket"], "ws://localhost/acp/echo", additional_headers=headers,
        compression=None, subprotocols=["acp.v1"],
    ) as ws:
        await ws.send({ACP_INITIALIZE!r})
        print(await ws.recv(), flush=True)

asyncio.run(main())
"""


@contextmanager
def daemon(env: dict[str, str]) -> Iterator[None]:
    """``oma-bridge serve`` in the runtime folder of ``env``, ready; SIGTERM on exit."""
    config = Path(env["XDG_CONFIG_HOME"]) / "bench.toml"
    config.write_text(CONFIG)
    process = subprocess.Popen(
        [PY, "-m", "oma_bridge.cli", "serve", "--config", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    discovery = Path(env["XDG_RUNTIME_DIR"]) / "oma-bridge" / "bridge.json"
    try:
        deadline = time.monotonic() + 20
        while not discovery.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the daemon did not start")
            time.sleep(0.01)
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(20)


def whole_process(argv: list[str], env: dict[str, str], expect: bytes) -> Callable[[], float]:
    def measure() -> float:
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, check=True, cwd=env["HOME"])
        elapsed = time.perf_counter() - start
        assert done.stdout.strip() == expect, done
        return elapsed

    return measure


def to_first_answer(
    argv: list[str], env: dict[str, str], stdin: bytes | None
) -> Callable[[], float]:
    """Spawn to the first line on stdout (an ``initialize`` answer); then stdin closes."""

    def measure() -> float:
        start = time.perf_counter()
        process = subprocess.Popen(
            argv,
            env=env,
            cwd=env["HOME"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert process.stdin is not None and process.stdout is not None
        if stdin is not None:
            process.stdin.write(stdin)
            process.stdin.flush()
        line = process.stdout.readline()
        elapsed = time.perf_counter() - start
        assert b'"result"' in line and b'"protocolVersion"' in line, line
        process.stdin.close()
        process.wait(20)
        process.stdout.close()
        assert process.stderr is not None
        process.stderr.close()
        return elapsed

    return measure


def rounds_of(
    contenders: list[tuple[str, Callable[[], float]]], rounds: int, per_round: int
) -> list[list[float]]:
    """Per-process seconds of each contender, one sample per round (the round's mean)."""
    for _, measure in contenders:
        for _ in range(2):
            measure()  # warm-up: page cache, .pyc files, the daemon's first requests
    samples: list[list[float]] = [[] for _ in contenders]
    order = list(range(len(contenders)))
    shuffle = random.Random(0).shuffle
    for _ in range(rounds):
        shuffle(order)
        for index in order:
            measure = contenders[index][1]
            samples[index].append(sum(measure() for _ in range(per_round)) / per_round)
    return samples


def rows_against(
    names: list[str], samples: list[list[float]], baseline: int, targets: dict[int, float]
) -> list[list[str]]:
    base_median, base_best = statistics.median(samples[baseline]), min(samples[baseline])
    rows = []
    for index, (name, out) in enumerate(zip(names, samples, strict=True)):
        median, best = statistics.median(out), min(out)
        ratio = median / base_median
        target = targets.get(index)
        verdict = (
            "-"
            if target is None
            else f"<= {target:.1f}x" + ("" if ratio <= target else " (missed)")
        )
        rows.append(
            [
                name,
                f"{median * 1e3:.1f}",
                f"{best * 1e3:.1f}",
                f"{ratio:.2f}x",
                f"{best / base_best:.2f}x",
                verdict,
            ]
        )
    return rows


def import_difference(env: dict[str, str], folder: Path, runs: int = 9) -> list[list[str]]:
    """Modules ``oma-bridge run echo hi`` imports beyond the bare script, by median self time."""

    def imported(argv: list[str]) -> dict[str, int]:
        done = subprocess.run(
            [PY, "-X", "importtime", *argv], env=env, capture_output=True, cwd=env["HOME"]
        )
        out = {}
        for line in done.stderr.decode().splitlines():
            if line.startswith("import time:") and "self [us]" not in line:
                parts = line.split("|")
                out[parts[2].strip()] = int(parts[0].split(":")[1])
        return out

    bare = folder / "bare_run.py"
    extra: dict[str, list[int]] = collections.defaultdict(list)
    for _ in range(runs):
        baseline = imported([str(bare), "hi"])
        for module, self_us in imported(["-m", "oma_bridge.cli", "run", "echo", "hi"]).items():
            if module not in baseline:
                extra[module].append(self_us)
    by_package: dict[str, float] = collections.defaultdict(float)
    for module, times in extra.items():
        parts = module.split(".")
        package = ".".join(parts[:2]) if parts[0] == "oma_bridge" else parts[0]
        by_package[package] += statistics.median(times)
    total = sum(by_package.values())
    rows = [
        [name, f"{us / 1e3:.1f}"] for name, us in sorted(by_package.items(), key=lambda x: -x[1])
    ]
    rows.append([f"all {len(extra)} modules", f"{total / 1e3:.1f}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--per-round", type=int, default=3)
    parser.add_argument("--importtime", action="store_true")
    parser.add_argument("--compare-with", type=Path, metavar="DIR")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="omab-bench-cli-", dir="/tmp") as name:
        folder = Path(name)
        env = {
            **installed_environment(),
            "XDG_RUNTIME_DIR": str(folder / "run"),
            "XDG_STATE_HOME": str(folder / "state"),
            "XDG_CONFIG_HOME": str(folder / "config"),
            # Every process starts there, so that the checkout's folder (the
            # current one, first on sys.path with -c) hides no --compare-with.
            "HOME": str(folder / "home"),
        }
        for sub in ("run", "state", "config", "home"):
            (folder / sub).mkdir(mode=0o700)
        (folder / "bare_run.py").write_text(BARE_RUN)
        (folder / "bare_acp.py").write_text(BARE_ACP)
        load = os.getloadavg()[0]
        with daemon(env):
            run_contenders = [
                (
                    "baseline: bare websockets script (run)",
                    whole_process([PY, str(folder / "bare_run.py"), "hi"], env, b"hi"),
                ),
                ("oma-bridge run echo hi", whole_process([CLI, "run", "echo", "hi"], env, b"hi")),
                (
                    "baseline: bare websockets script (acp initialize)",
                    to_first_answer([PY, str(folder / "bare_acp.py")], env, None),
                ),
                (
                    "oma-bridge acp echo, to the initialize answer",
                    to_first_answer([CLI, "acp", "echo"], env, ACP_INITIALIZE.encode() + b"\n"),
                ),
                ("info: python -c pass", whole_process([PY, "-c", "pass"], env, b"")),
            ]
            if args.compare_with is not None:
                other = {**env, "PYTHONPATH": str(args.compare_with.resolve())}
                # The checkout's console script: console_main where it has one.
                entry = [
                    PY,
                    "-c",
                    "import sys; from oma_bridge import cli; "
                    "sys.exit(getattr(cli, 'console_main', cli.main)())",
                ]
                run_contenders += [
                    (
                        f"{args.compare_with}: oma-bridge run echo hi",
                        whole_process([*entry, "run", "echo", "hi"], other, b"hi"),
                    ),
                    (
                        f"{args.compare_with}: oma-bridge acp echo",
                        to_first_answer(
                            [*entry, "acp", "echo"], other, ACP_INITIALIZE.encode() + b"\n"
                        ),
                    ),
                ]
            samples = rounds_of(run_contenders, args.rounds, args.per_round)
            imports = import_difference(env, folder) if args.importtime else []
    names = [name for name, _ in run_contenders]
    rows = rows_against(names[:2], samples[:2], 0, {1: 1.3})
    rows += rows_against(names[2:4], samples[2:4], 0, {1: 1.2})
    info = rows_against(names[4:5], samples[4:5], 0, {})
    info[0][3:5] = ["", ""]
    if len(names) > 5:
        rows.insert(2, rows_against([names[0], names[5]], [samples[0], samples[5]], 0, {})[1])
        rows.append(rows_against([names[2], names[6]], [samples[2], samples[6]], 0, {})[1])
    rows += info
    print(f"# {machine()}; load average {load:.2f} at the start")
    print(f"# {args.rounds} rounds of {args.per_round} processes each, order shuffled per round")
    print()
    headers = ["contender", "median ms", "best ms", "ratio (median)", "ratio (best)", "target"]
    print_table(headers, rows)
    if imports:
        print()
        print_table(["imported beyond the bare script (run)", "self ms (median)"], imports)


if __name__ == "__main__":
    main()
