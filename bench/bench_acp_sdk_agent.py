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
  ``text`` event per chunk), counting the text events the consumer gets.

Spawn and session set-up are not measured.  Reported: chunks/s (median and
best round) and the ratio of the medians (target >= 0.8x).  The batching
agent of ``bench_acp.py`` stays the second row of the ACP figures.

Run: ``.venv/bin/python bench/bench_acp_sdk_agent.py [--chunks 20000] [--rounds 5]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import anyio
import orjson
from _util import machine, print_table

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
    for _ in range(rounds):  # alternating, one round each, so load hits both alike
        bare += await bare_reader(node, env, chunks, 1)
        ours += await agent_stream(node, env, chunks, 1)
    print(machine())
    print_table(
        ["path", "chunks/s median", "best", "ratio (median)"],
        [
            [
                "bare reader (readline + orjson.loads)",
                f"{statistics.median(bare):,.0f}",
                f"{max(bare):,.0f}",
                "1.00",
            ],
            [
                "Agent.stream (default)",
                f"{statistics.median(ours):,.0f}",
                f"{max(ours):,.0f}",
                f"{statistics.median(ours) / statistics.median(bare):.2f}",
            ],
        ],
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    anyio.run(main, options.chunks, options.rounds)
