"""The ACP facade against baselines measured in the same run.

(a) **Turn throughput.**  The TypeScript SDK chunk agent
    (``tests/agents/acp_ts_chunk_agent.mjs``: one message per write, each
    notification awaited, as SDK agents do) answers ``chunks 20000``.  One
    lean client (below: it writes requests, counts ``agent_message_chunk``
    lines, and times a prompt from its write to its answer) reads it

    * directly, spawning the agent (the baseline);
    * through the facade: spawning ``oma-bridge acp chunks`` (the shim), which
      relays to a daemon whose ``chunks`` profile runs the same agent;
    * diagnostic: the same daemon's ``/acp/chunks`` read with ``websockets``
      straight on its unix socket (the facade without the shim).

    * with ``--before CHECKOUT`` (another checkout of ``oma_bridge``, run with
      ``PYTHONPATH=CHECKOUT``), two more in the same rounds: the same daemon
      through CHECKOUT's shim (before D24 a shim offers ``acp.v1`` alone and
      reads one message per frame), and a second daemon of CHECKOUT through
      CHECKOUT's shim (everything as it was).

    Each contender keeps its process and session across rounds; the rounds
    alternate (A, B, C, A, ...).  Target: the facade >= 0.7x the baseline.

(b) **Start-up.**  A fresh ``oma-bridge acp echo`` process, from its start to
    its ``initialize`` answer on stdout, against a fresh bare Python process
    that reads the discovery file, connects to ``/acp/echo`` with
    ``websockets`` and sends the same ``initialize``.  Target: <= 1.5x.

The daemon is a subprocess (``oma-bridge serve``) with private XDG folders.
Run: ``.venv/bin/python bench/bench_acp_facade.py [--chunks 20000] [--rounds 7]
[--starts 21] [--no-persist] [--before CHECKOUT]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from _util import installed_environment, machine, print_table
from websockets.asyncio.client import ClientConnection, unix_connect

ROOT = Path(__file__).resolve().parent.parent
TS_AGENT = ROOT / "tests" / "agents" / "acp_ts_chunk_agent.mjs"
OMA_BRIDGE = str(Path(sys.executable).with_name("oma-bridge"))
SDK_PACKAGE = "@agentclientprotocol/sdk"


def sdk_dir() -> Path:
    """The folder holding node_modules/@agentclientprotocol/sdk (tests/support installs it)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from support.npm_peers import ACP_TS_SDK, install_package

    return install_package(ACP_TS_SDK)


def initialize(request_id: int = 0) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {"protocolVersion": 1, "clientInfo": {"name": "bench", "version": "1"}},
    }


@dataclass
class Daemon:
    process: subprocess.Popen[bytes]
    folder: Path
    env: dict[str, str]

    @property
    def discovery(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(
            (Path(self.env["XDG_RUNTIME_DIR"]) / "oma-bridge" / "bridge.json").read_text()
        )
        return data


@contextlib.contextmanager
def daemon(
    sdk: Path, *, persist: bool, code: Path | None = None, server: str = ""
) -> Iterator[Daemon]:
    """A daemon of this checkout, or of ``code`` (another checkout's root, by ``PYTHONPATH``).

    ``server``: more ``[server]`` keys (``bench_loop.py``'s ``event_loop``).
    """
    folder = Path(tempfile.mkdtemp(prefix="omabf-", dir="/tmp"))
    runtime = folder / "run"
    runtime.mkdir(mode=0o700)
    work = folder / "work"
    work.mkdir()
    env = {
        **installed_environment(),
        "XDG_RUNTIME_DIR": str(runtime),
        "XDG_STATE_HOME": str(folder / "state"),
        "XDG_CONFIG_HOME": str(folder / "config"),
        "OMA_ACP_TS_SDK_DIR": str(sdk),
    }
    if code is not None:
        env["PYTHONPATH"] = str(code)
    config = folder / "bridge.toml"
    config.write_text(
        f'[server]\nsocket = "auto"\nworkspace_roots = ["{work}"]\n'
        f"persist_sessions = {str(persist).lower()}\n{server}\n"
        '[agents.echo]\nkind = "llm"\nprovider = "echo"\nmodel = "echo-1"\n'
        f'[agents.chunks]\nkind = "acp"\ncommand = "node"\nargs = ["{TS_AGENT}"]\n'
        f'cwd = "client"\nenv = {{ OMA_ACP_TS_SDK_DIR = "{sdk}" }}\n'
    )
    with (folder / "daemon.log").open("wb") as log:
        process = subprocess.Popen(
            [OMA_BRIDGE, "serve", "--config", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
        )
    found = Daemon(process, folder, env)
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError, ValueError, KeyError):
                if found.discovery["pid"] == process.pid:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"the daemon did not start: {(folder / 'daemon.log').read_text()}")
            time.sleep(0.02)
        yield found
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)
        shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------- (a) throughput


class Reader:
    """One ACP client: a transport, a session, and timed ``chunks N`` turns."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.session = ""
        self._ids = iter(range(1, 1 << 30))

    async def send(self, message: dict[str, Any]) -> None:
        raise NotImplementedError

    async def line(self) -> bytes | str:
        raise NotImplementedError

    async def call(self, method: str, params: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """Send a request; its answer and the number of agent_message_chunk updates before it."""
        request_id = next(self._ids)
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        chunks = 0
        marker = "agent_message_chunk"
        while True:
            line = await self.line()
            if (marker in line) if isinstance(line, str) else (marker.encode() in line):
                chunks += 1
                continue
            message = json.loads(line)
            if message.get("id") == request_id and "method" not in message:
                return message, chunks

    async def start(self, cwd: Path) -> None:
        await self.call("initialize", initialize()["params"])
        answer, _ = await self.call("session/new", {"cwd": str(cwd), "mcpServers": []})
        self.session = answer["result"]["sessionId"]

    async def turn(self, chunks: int) -> float:
        """Seconds for one ``chunks N`` turn, from the prompt's write to its answer."""
        prompt = [{"type": "text", "text": f"chunks {chunks}"}]
        started = time.perf_counter()
        answer, got = await self.call(
            "session/prompt", {"sessionId": self.session, "prompt": prompt}
        )
        elapsed = time.perf_counter() - started
        assert answer.get("result") == {"stopReason": "end_turn"}, answer
        assert got == chunks, f"{self.name}: {got} chunks of {chunks}"
        return elapsed


class StdioReader(Reader):
    def __init__(self, name: str, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        super().__init__(name)
        self.argv, self.env, self.cwd = argv, env, cwd
        self.process: asyncio.subprocess.Process | None = None

    async def open(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=self.env,
            cwd=self.cwd,
            limit=1 << 26,
        )

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        await self.process.stdin.drain()

    async def line(self) -> bytes:
        assert self.process is not None and self.process.stdout is not None
        return await self.process.stdout.readline()

    async def close(self) -> None:
        if self.process is not None and self.process.stdin is not None:
            self.process.stdin.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.process.wait(), 5)
            if self.process.returncode is None:
                self.process.kill()
                await self.process.wait()


class WebSocketReader(Reader):
    def __init__(self, name: str, socket: str, path: str) -> None:
        super().__init__(name)
        self.socket, self.path = socket, path
        self.ws: ClientConnection | None = None

    async def open(self) -> None:
        self.ws = await unix_connect(
            self.socket, f"ws://localhost{self.path}", max_size=None, compression=None
        )

    async def send(self, message: dict[str, Any]) -> None:
        assert self.ws is not None
        await self.ws.send(json.dumps(message))

    async def line(self) -> str:
        assert self.ws is not None
        frame = await self.ws.recv()
        return frame if isinstance(frame, str) else frame.decode()

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()


def cpu_seconds(pid: int | None) -> float:
    if pid is None:
        return 0.0
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def throughput(
    found: Daemon, chunks: int, rounds: int, old: tuple[Path, Daemon] | None = None
) -> list[list[object]]:
    work = found.folder / "work"
    readers: list[Any] = [
        StdioReader(
            "baseline: the client reads the agent directly",
            ["node", str(TS_AGENT)],
            found.env,
            work,
        ),
        StdioReader(
            "facade: agent -> daemon -> shim (oma-bridge acp) -> client",
            [OMA_BRIDGE, "acp", "chunks"],
            found.env,
            work,
        ),
        WebSocketReader(
            "diagnostic: agent -> daemon -> /acp/chunks websocket -> client",
            str(found.discovery["socket"]),
            "/acp/chunks",
        ),
    ]
    # Each reader's daemon, and the readers whose process is a shim (its CPU measured too).
    daemons = [found, found, found]
    shims = {1}
    if old is not None:
        code, old_daemon = old
        old_shim = [sys.executable, "-m", "oma_bridge.cli", "acp", "chunks"]
        old_env = {**found.env, "PYTHONPATH": str(code)}
        old_work = old_daemon.folder / "work"
        readers += [
            StdioReader("facade, the shim of --before", old_shim, old_env, work),
            StdioReader("facade, daemon and shim of --before", old_shim, old_daemon.env, old_work),
        ]
        daemons += [found, old_daemon]
        shims |= {3, 4}
    samples: list[list[float]] = [[] for _ in readers]
    # CPU microseconds per chunk: of the daemon, and of the shim (its own process).
    daemon_cpu: list[list[float]] = [[] for _ in readers]
    shim_cpu: list[list[float]] = [[] for _ in readers]
    try:
        for reader in readers:
            await reader.open()
            await reader.start(daemons[readers.index(reader)].folder / "work")
            await reader.turn(chunks)  # warm-up: the agent started, the JIT warm
        for _ in range(rounds):
            for index, reader in enumerate(readers):
                shim = reader.process.pid if index in shims else None
                pid = daemons[index].process.pid
                before = cpu_seconds(pid), cpu_seconds(shim)
                samples[index].append(chunks / await reader.turn(chunks))
                after = cpu_seconds(pid), cpu_seconds(shim)
                daemon_cpu[index].append((after[0] - before[0]) / chunks * 1e6)
                shim_cpu[index].append((after[1] - before[1]) / chunks * 1e6)
    finally:
        for reader in readers:
            await reader.close()
    base = statistics.median(samples[0])
    rows: list[list[object]] = []
    for index, reader in enumerate(readers):
        median = statistics.median(samples[index])
        daemon_us = statistics.median(daemon_cpu[index])
        shim_us = statistics.median(shim_cpu[index])
        rows.append(
            [
                reader.name,
                f"{median:,.0f}",
                f"{max(samples[index]):,.0f}",
                f"{median / base:.2f}x",
                f"{daemon_us:.1f}" if index else "-",
                f"{shim_us:.1f}" if index in shims else "-",
            ]
        )
    return rows


# ---------------------------------------------------------------- (b) start-up

BARE_CLIENT = """
import asyncio, json, os, sys
from websockets.asyncio.client import unix_connect

async def main():
    path = os.path.join(os.environ["XDG_RUNTIME_DIR"], "oma-bridge", "bridge.json")
    with open(path) as f:
        found = json.load(f)
    headers = {"Authorization": "Bearer " + found["token"]}
    async with unix_connect(found["socket"], "ws://localhost/acp/echo",
                            additional_headers=headers, compression=None) as ws:
        await ws.send(sys.argv[1])
        sys.stdout.write(await ws.recv() + "\\n")
        sys.stdout.flush()

asyncio.run(main())
"""


def time_to_answer(argv: list[str], env: dict[str, str], stdin: bytes | None) -> float:
    """Seconds from starting ``argv`` to its first line on stdout (an initialize answer)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert process.stdin is not None and process.stdout is not None
    if stdin is not None:
        process.stdin.write(stdin)
        process.stdin.flush()
    line = process.stdout.readline()
    elapsed = time.perf_counter() - started
    process.stdin.close()
    process.wait(timeout=10)
    assert json.loads(line)["result"]["protocolVersion"] == 1, line
    return elapsed


def startup(found: Daemon, starts: int) -> list[list[object]]:
    request = json.dumps(initialize())
    contenders = [
        (
            "baseline: python + websockets, one initialize",
            [sys.executable, "-c", BARE_CLIENT, request],
            None,
        ),
        (
            "oma-bridge acp echo: start to initialize answer",
            [OMA_BRIDGE, "acp", "echo"],
            request.encode() + b"\n",
        ),
    ]
    samples: list[list[float]] = [[] for _ in contenders]
    for _ in range(2):  # warm-up: the page cache
        for _name, argv, stdin in contenders:
            time_to_answer(argv, found.env, stdin)
    for _ in range(starts):
        for (_name, argv, stdin), out in zip(contenders, samples, strict=True):
            out.append(time_to_answer(argv, found.env, stdin))
    base = statistics.median(samples[0])
    return [
        [
            name,
            f"{statistics.median(s) * 1000:.1f}",
            f"{min(s) * 1000:.1f}",
            f"{statistics.median(s) / base:.2f}x",
        ]
        for (name, _argv, _stdin), s in zip(contenders, samples, strict=True)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--starts", type=int, default=21)
    parser.add_argument("--no-persist", action="store_true", help="persist_sessions = false")
    parser.add_argument(
        "--before",
        type=Path,
        metavar="CHECKOUT",
        help="also relay through this checkout's shim, and its daemon and shim (PYTHONPATH)",
    )
    args = parser.parse_args()
    print(machine())
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    sdk = sdk_dir()
    persist = not args.no_persist
    with contextlib.ExitStack() as stack:
        found = stack.enter_context(daemon(sdk, persist=persist))
        old = None
        if args.before is not None:
            old = (args.before, stack.enter_context(daemon(sdk, persist=persist, code=args.before)))
        rows = asyncio.run(throughput(found, args.chunks, args.rounds, old))
        print(f"\n(a) {args.chunks:,}-chunk turns, median of {args.rounds} interleaved rounds")
        headers = ["contender", "median chunks/s", "best chunks/s", "ratio"]
        print_table([*headers, "daemon CPU µs/chunk", "shim CPU µs/chunk"], rows)
        print(f"\n(b) start to initialize answer, median of {args.starts} interleaved starts")
        print_table(["contender", "median ms", "best ms", "ratio"], startup(found, args.starts))
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
