"""ACP relay against an agent that writes the way real agents do: one message per write.

Agents on the official TypeScript SDK (claude-agent-acp, codex-acp, gemini's)
write one JSON-RPC message per ``write()`` and await each notification, so
every chunk costs the reader a wake-up.  ``tests/agents/acp_ts_chunk_agent.mjs``
does the same on ``@agentclientprotocol/sdk`` 2.4.0 (installed from npm into
the cache ``tests/support/npm_peers.py`` uses).  It answers ``chunks N`` with
N ``agent_message_chunk`` updates.  In the same run, in alternating rounds:

* **baseline**: a bare Python reader of the same agent's stdout (asyncio
  ``readline`` + ``orjson.loads`` per line), counting the updates;
* **oma-bridge**: ``Agent.stream`` with ``AcpConfig`` (default settings: one
  ``text`` event per chunk), counting the text events the consumer gets;
* **through the daemon**: a real ``oma-bridge serve`` with the agent as a
  profile, and a raw ``websockets`` client of ``agent/stream`` counting the
  chunks in its ``run/event`` frames (default settings); its daemon and
  agent stay up across rounds, whose turns alternate with the other two.

Also reported: the daemon's CPU time per relayed chunk (user + system of all
its threads, psutil; it moves far less with the machine's load than
throughput does), and the time to the first text event, in-process and
through the daemon (a ``chunks 1`` turn, median of the rounds).

Spawn and session set-up are not measured.  Reported: chunks/s (median and
best round) and the ratio of the medians (target >= 0.8x).  The batching
agent of ``bench_acp.py`` stays the second row of the ACP figures.

Run: ``.venv/bin/python bench/bench_acp_sdk_agent.py [--chunks 20000] [--rounds 5]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import orjson
import psutil
from _util import machine, print_table
from websockets.asyncio.client import unix_connect

from oma_bridge import Agent, AgentConfig
from oma_bridge.backends.acp.config import AcpConfig

ROOT = Path(__file__).resolve().parent.parent
AGENT = ROOT / "tests" / "agents" / "acp_ts_chunk_agent.mjs"
sys.path.insert(0, str(ROOT / "tests"))
from support import npm_peers  # noqa: E402  (the tests' npm cache, shared)


async def bare_reader(node: str, env: dict[str, str], chunks: int, rounds: int) -> list[float]:
    process = await asyncio.create_subprocess_exec(
        node,
        str(AGENT),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, **env},
        limit=64 * 1024 * 1024,
    )
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout

    def send(request_id: int, method: str, params: object) -> None:
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        stdin.write(orjson.dumps(message) + b"\n")

    async def until(request_id: int) -> int:
        updates = 0
        while True:
            message = orjson.loads(await stdout.readline())
            if message.get("method") == "session/update":
                updates += 1
            if message.get("id") == request_id:
                return updates

    send(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    await until(1)
    send(2, "session/new", {"cwd": "/tmp", "mcpServers": []})
    while True:
        message = orjson.loads(await stdout.readline())
        if message.get("id") == 2:
            session = message["result"]["sessionId"]
            break
    rates = []
    for round_ in range(rounds):
        started = time.perf_counter()
        send(
            3 + round_,
            "session/prompt",
            {"sessionId": session, "prompt": [{"type": "text", "text": f"chunks {chunks}"}]},
        )
        got = await until(3 + round_)
        rates.append(got / (time.perf_counter() - started))
    stdin.close()
    process.kill()
    await process.wait()
    return rates


async def agent_stream(node: str, env: dict[str, str], chunks: int, rounds: int) -> list[float]:
    config = AcpConfig(command=node, args=(str(AGENT),), env=env, cwd=Path("/tmp"))
    rates = []
    async with Agent(AgentConfig(name="ts", backend=config)) as agent:
        await agent.run("warm up")  # spawn and session, not measured
        for _ in range(rounds):
            started = time.perf_counter()
            got = 0
            async for event in agent.stream(f"chunks {chunks}"):
                got += event.type == "text"
            rates.append(got / (time.perf_counter() - started))
    return rates


@contextlib.asynccontextmanager
async def daemon(node: str, env: dict[str, str]) -> AsyncIterator[tuple[Path, int]]:
    """A real daemon with the agent as profile ``ts``; yields its socket and pid."""
    with tempfile.TemporaryDirectory(prefix="oma-bench-") as folder:
        root = Path(folder)
        (root / "run").mkdir(mode=0o700)
        config = root / "bridge.toml"
        config.write_text(
            f'[server]\nsocket = "{root}/run/bridge.sock"\n'
            f'[agents.ts]\nkind = "acp"\ncommand = "{node}"\nargs = ["{AGENT}"]\n'
            f'env = {{ OMA_ACP_TS_SDK_DIR = "{env["OMA_ACP_TS_SDK_DIR"]}" }}\n'
        )
        process = await anyio.open_process(
            [sys.executable, "-m", "oma_bridge.cli", "serve", "--config", str(config)],
            env={**os.environ, "XDG_STATE_HOME": str(root / "state")},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            with anyio.fail_after(20):
                while not (root / "run" / "bridge.json").exists():  # noqa: ASYNC110 (another process)
                    await anyio.sleep(0.05)
            yield root / "run" / "bridge.sock", process.pid
        finally:
            process.terminate()
            with anyio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()


class _Session:
    """A raw websocket client of the daemon: requests by id, frames as they come."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.next_id = 0

    async def call(self, method: str, params: dict[str, Any]) -> int:
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        await self.ws.send(orjson.dumps(message).decode())
        return self.next_id

    async def answer(self, request_id: int) -> dict[str, Any]:
        while True:
            message: dict[str, Any] = orjson.loads(await self.ws.recv())
            if message.get("id") == request_id:
                return message

    async def stream(self, agent_id: str, chunks: int) -> tuple[int, float, float]:
        """``(chunks seen, seconds to the first text, seconds to the answer)``."""
        started = time.perf_counter()
        params = {"agentId": agent_id, "input": f"chunks {chunks}"}
        request_id = await self.call("agent/stream", params)
        got, first = 0, 0.0
        while True:
            message = orjson.loads(await self.ws.recv())
            if message.get("id") == request_id:
                return got, first, time.perf_counter() - started
            event = message["params"]["event"]
            if event["type"] == "text":
                first = first or time.perf_counter() - started
                got += event["data"].count("\n")  # chunk i is "i\n": joined frames count right


@contextlib.asynccontextmanager
async def daemon_client(socket: Path) -> AsyncIterator[tuple[_Session, str]]:
    """A raw client of the daemon with the ``ts`` agent open (spawned, session made)."""
    async with unix_connect(str(socket), "ws://localhost/", max_size=None, compression=None) as ws:
        session = _Session(ws)
        info = {"name": "bench", "version": "0"}
        await session.answer(
            await session.call("initialize", {"protocolVersion": 1, "clientInfo": info})
        )
        opened = await session.answer(await session.call("agent/open", {"profile": "ts"}))
        agent_id = opened["result"]["agentId"]
        await session.answer(await session.call("agent/run", {"agentId": agent_id, "input": "hi"}))
        yield session, agent_id


def cpu_seconds(process: psutil.Process) -> float:
    """User + system CPU of ``process`` and its threads (its children not included)."""
    times = process.cpu_times()
    return float(times.user + times.system)


async def first_in_process(node: str, env: dict[str, str], rounds: int) -> float:
    config = AcpConfig(command=node, args=(str(AGENT),), env=env, cwd=Path("/tmp"))
    firsts = []
    async with Agent(AgentConfig(name="ts", backend=config)) as agent:
        await agent.run("warm up")
        for _ in range(rounds):
            started = time.perf_counter()
            async for event in agent.stream("chunks 1"):
                if event.type == "text":
                    firsts.append(time.perf_counter() - started)
    return statistics.median(firsts)


def _row(name: str, rates: list[float], baseline: list[float]) -> list[str]:
    ratio = statistics.median(rates) / statistics.median(baseline)
    return [name, f"{statistics.median(rates):,.0f}", f"{max(rates):,.0f}", f"{ratio:.2f}"]


async def main(chunks: int, rounds: int) -> None:
    node = shutil.which("node")
    try:
        sdk = npm_peers.install_package(npm_peers.ACP_TS_SDK)
    except npm_peers.NpmUnavailable as error:
        print(f"skipped: {error}")
        return
    if node is None:
        print("skipped: node is not on PATH")
        return
    env = {"OMA_ACP_TS_SDK_DIR": str(sdk)}
    bare: list[float] = []
    ours: list[float] = []
    relayed: list[float] = []
    firsts: list[float] = []
    daemon_cpu: list[float] = []
    async with daemon(node, env) as (socket, pid), daemon_client(socket) as (session, agent_id):
        serving = psutil.Process(pid)
        # Alternating, one round each, so the machine's load hits all three alike.
        for _ in range(rounds):
            bare += await bare_reader(node, env, chunks, 1)
            ours += await agent_stream(node, env, chunks, 1)
            before = cpu_seconds(serving)
            got, _first, elapsed = await session.stream(agent_id, chunks)
            daemon_cpu.append((cpu_seconds(serving) - before) / got * 1e6)
            relayed.append(got / elapsed)
            firsts.append((await session.stream(agent_id, 1))[1])
    first_daemon = statistics.median(firsts)
    first_local = await first_in_process(node, env, rounds)
    print(machine())
    print_table(
        ["path", "chunks/s median", "best", "ratio (median)"],
        [
            _row("bare reader (readline + orjson.loads)", bare, bare),
            _row("Agent.stream (default)", ours, bare),
            _row("daemon -> websocket client (agent/stream)", relayed, bare),
        ],
    )
    print(
        f"daemon CPU (user + system, all its threads) per relayed chunk: "
        f"median {statistics.median(daemon_cpu):.1f} us, least {min(daemon_cpu):.1f} us"
    )
    added = (first_daemon - first_local) * 1000
    print(
        f"first text event: in-process {first_local * 1000:.2f} ms, "
        f"through the daemon {first_daemon * 1000:.2f} ms ({added:+.2f} ms)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    anyio.run(main, options.chunks, options.rounds)
