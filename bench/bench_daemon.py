"""The daemon against baselines measured in the same run: one table, five measurements.

(a) ``daemon/status`` round trip, unix socket and TCP, against a bare
    ``websockets`` echo server on the same transport (both servers are
    subprocesses; the same raw websockets client talks to both);
(b) a ``cat`` run through the daemon (``RemoteAgent.run``) against
    ``asyncio.create_subprocess_exec`` + ``communicate`` in the bench process;
(c) text events per second of an ACP agent (``tests/agents/acp_chunk_agent.py``,
    20,000 ``agent_message_chunk`` updates per turn) relayed by ``agent/stream``
    to a raw websockets client, against reading the same agent's stdout
    directly (chunked reads, one ``orjson.loads`` per line);
(d) daemon RSS growth per idle open agent (100 echo agents, and 100 ACP agents,
    which spawn nothing until their first run);
(e) ``python -m oma_bridge.cli serve --config F`` to ready (the discovery file
    appears; first successful ``initialize``), against ``python -c pass``;
(f) the journal on the relay: text events per second of an echo ``agent/stream``
    (one event per word) to a raw websockets client, with a watcher following
    the agent (``agent/watch``, read by a second connection in a process of
    its own, as ``oma-bridge watch`` in another terminal would) and with
    ``persist_sessions`` on, each against the same stream with neither
    (``persist_sessions = false``, no watcher), in alternating rounds;
(g) replaying 10,000 journal entries to a watcher (``agent/watch afterSeq``,
    until its answer, which follows the replay), against the time the same
    number of entries took live in (f)'s baseline.

The daemon always runs as a subprocess (``oma-bridge serve``), so its RSS and
its start-up are its own.  Contenders of a pair alternate round by round, so
a noisy neighbour hits both alike.  ``--profile DIR`` runs the daemon under
cProfile and prints where its time went.

Run: ``.venv/bin/python bench/bench_daemon.py [--rounds 9] [--only fg] [--profile /tmp/prof]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.streams.text
import orjson
import psutil
from _util import machine, print_table
from websockets.asyncio.client import ClientConnection, unix_connect
from websockets.asyncio.client import connect as ws_connect

from oma_bridge.agent import Agent, AgentConfig
from oma_bridge.backends.acp import AcpConfig
from oma_bridge.client import connect

ROOT = Path(__file__).resolve().parent.parent
CHUNK_AGENT = ROOT / "tests" / "agents" / "acp_chunk_agent.py"
PY = sys.executable

CONFIG = f"""
[server]
socket = "{{folder}}/bridge.sock"
tcp = "127.0.0.1:0"
max_concurrent_runs = 256

[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"

[agents.catter]
kind = "process"
command = "cat"

[agents.chunks]
kind = "acp"
command = "{PY}"
args = ["{CHUNK_AGENT}"]
fs = "none"
permission = "reject"

[agents.chunks_coalesced]
kind = "acp"
command = "{PY}"
args = ["{CHUNK_AGENT}"]
fs = "none"
permission = "reject"
coalesce_text = true
"""

ECHO_SERVER = """
import asyncio, sys
from websockets.asyncio.server import serve, unix_serve

async def echo(ws):
    async for message in ws:
        await ws.send(message)

async def main():
    options = {"compression": None, "max_size": 16 * 1024 * 1024, "server_header": None}
    unix = unix_serve(echo, sys.argv[1], **options)
    async with unix, serve(echo, "127.0.0.1", 0, **options) as tcp:
        port = tcp.sockets[0].getsockname()[1]
        print(port, flush=True)
        await asyncio.Future()

asyncio.run(main())
"""

WS_OPTIONS: dict[str, Any] = {"compression": None, "max_size": None}


@dataclass
class Daemon:
    process: subprocess.Popen[bytes]
    folder: Path
    socket: str
    url: str
    token: str


@asynccontextmanager
async def daemon(
    profile_dir: Path | None = None,
    tag: str = "",
    server: str = "",
    agents: str = "",
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[Daemon]:
    """``oma-bridge serve`` in a subprocess, ready; SIGTERM on exit.

    ``server``: more ``[server]`` keys (``{folder}`` stands for the daemon's
    folder); ``agents``: more profiles, appended to :data:`CONFIG`'s; ``env``: the
    daemon's environment (default: ours).
    """
    with tempfile.TemporaryDirectory(prefix="omab-bench-", dir="/tmp") as name:
        folder = Path(name)
        config = folder / "config.toml"
        text = (CONFIG + agents).replace("[server]\n", f"[server]\n{server}\n", 1)
        config.write_text(text.replace("{folder}", str(folder)))
        command = [PY, "-m", "oma_bridge.cli", "serve", "--config", str(config)]
        if profile_dir is not None:
            out = profile_dir / f"daemon{tag}.prof"
            command = [PY, "-m", "cProfile", "-o", str(out), *command[1:]]
        variables = {
            **(os.environ if env is None else env),
            "XDG_STATE_HOME": str(folder / "state"),
        }
        # Popen, not anyio.open_process: the daemon must not share our event loop's child watcher.
        process = subprocess.Popen(command, env=variables, stderr=subprocess.DEVNULL)  # noqa: ASYNC220
        try:
            discovery = folder / "bridge.json"
            with anyio.fail_after(20):
                while not discovery.exists():  # noqa: ASYNC110 - a file of another process
                    await anyio.sleep(0.005)
            data = orjson.loads(discovery.read_bytes())
            yield Daemon(process, folder, data["socket"], data["url"], data["token"])
        finally:
            process.send_signal(signal.SIGTERM)
            await anyio.to_thread.run_sync(process.wait, 20)


@asynccontextmanager
async def echo_server(folder: Path) -> AsyncIterator[tuple[str, str]]:
    """A bare websockets echo server in a subprocess: (unix path, ws url)."""
    path = str(folder / "echo.sock")
    process = await anyio.open_process([PY, "-c", ECHO_SERVER, path], stderr=None)
    try:
        assert process.stdout is not None
        line = b""
        with anyio.fail_after(20):
            while not line.endswith(b"\n"):
                line += await process.stdout.receive(64)
        yield path, f"ws://127.0.0.1:{int(line)}/"
    finally:
        process.terminate()
        await process.wait()


async def initialized(ws: ClientConnection) -> ClientConnection:
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": 1, "clientInfo": {"name": "bench", "version": "0"}},
    }
    await ws.send(orjson.dumps(init).decode())
    assert "result" in orjson.loads(await ws.recv())
    return ws


async def alternate(
    contenders: list[Callable[[], Awaitable[float]]], rounds: int
) -> list[list[float]]:
    """Each contender returns its own measure of one round; rounds alternate A, B, A, B."""
    for contender in contenders:
        await contender()  # warm-up
    samples: list[list[float]] = [[] for _ in contenders]
    for _ in range(rounds):
        for contender, out in zip(contenders, samples, strict=True):
            out.append(await contender())
    return samples


def round_trips(ws: ClientConnection, frame: bytes, count: int) -> Callable[[], Awaitable[float]]:
    """Seconds per round trip of ``frame`` (sent as text), over ``count`` trips."""
    text = frame.decode()

    async def measure() -> float:
        start = time.perf_counter()
        for _ in range(count):
            await ws.send(text)
            await ws.recv()
        return (time.perf_counter() - start) / count

    return measure


# ---------------------------------------------------------------------------
# (a) daemon/status round trip


async def bench_status(d: Daemon, rounds: int) -> list[list[Any]]:
    status = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "daemon/status"})
    listing = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "agents/list"})
    auth: dict[str, Any] = {"additional_headers": {"Authorization": f"Bearer {d.token}"}}
    rows = []
    async with echo_server(d.folder) as (echo_path, echo_url):  # noqa: SIM117 - needs its paths
        async with (
            await unix_connect(d.socket, "ws://localhost/", **WS_OPTIONS) as unix_daemon,
            await unix_connect(echo_path, "ws://localhost/", **WS_OPTIONS) as unix_echo,
            await ws_connect(d.url, **WS_OPTIONS, **auth) as tcp_daemon,
            await ws_connect(echo_url, **WS_OPTIONS) as tcp_echo,
        ):
            await initialized(unix_daemon)
            await initialized(tcp_daemon)
            for method, frame, transport, ours, theirs in (
                ("daemon/status", status, "unix", unix_daemon, unix_echo),
                ("daemon/status", status, "TCP", tcp_daemon, tcp_echo),
                # Diagnostic: a method that reads no /proc, for where the time goes.
                ("agents/list", listing, "unix", unix_daemon, unix_echo),
            ):
                samples = await alternate(
                    [round_trips(ours, frame, 200), round_trips(theirs, frame, 200)], rounds
                )
                a, b = (statistics.median(s) for s in samples)
                diagnostic = method != "daemon/status"
                rows.append(
                    [
                        f"(a) {method} round trip, {transport}",
                        f"{a * 1e6:.0f} us",
                        f"{b * 1e6:.0f} us (websockets echo)",
                        a / b,
                        "(diagnostic)" if diagnostic else "<= 1.5x",
                        None if diagnostic else a / b <= 1.5,
                    ]
                )
    return rows


# ---------------------------------------------------------------------------
# (b) a cat run


async def bench_cat(d: Daemon, rounds: int) -> list[list[Any]]:
    prompt = "hello from the bench"
    per_round = 10
    async with connect(socket=d.socket) as client:
        agent = await client.open("catter")

        async def through_daemon() -> float:
            start = time.perf_counter()
            for _ in range(per_round):
                result = await agent.run(prompt)
                assert result.output == prompt, result
            return (time.perf_counter() - start) / per_round

        async def direct() -> float:
            start = time.perf_counter()
            for _ in range(per_round):
                process = await asyncio.create_subprocess_exec(
                    "cat",
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                )
                out, _ = await process.communicate(prompt.encode())
                assert out.decode() == prompt
            return (time.perf_counter() - start) / per_round

        echo = await client.open("echo")

        async def echo_run() -> float:
            # Diagnostic: the same request with no process to spawn.
            start = time.perf_counter()
            for _ in range(per_round):
                await echo.run(prompt)
            return (time.perf_counter() - start) / per_round

        samples = await alternate([through_daemon, direct, echo_run], rounds)
    a, b, floor = (statistics.median(s) for s in samples)
    return [
        [
            "(b) `cat` run (RemoteAgent.run)",
            f"{a * 1e3:.2f} ms",
            f"{b * 1e3:.2f} ms (create_subprocess_exec + communicate)",
            a / b,
            "<= 1.3x",
            a / b <= 1.3,
        ],
        [
            "(b) echo LLM run (RemoteAgent.run, no spawn)",
            f"{floor * 1e3:.2f} ms",
            "",
            "",
            "(diagnostic)",
            None,
        ],
    ]


# ---------------------------------------------------------------------------
# (c) ACP text events relayed


class DirectAcp:
    """The chunk agent read straight from its stdout: what a client could do alone."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.buffer = b""
        self.next_id = 0

    async def call(self, method: str, params: Any) -> tuple[Any, int]:
        """Send one request; read until its answer; return (result, characters of text seen)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.next_id += 1
        request = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        await self.process.stdin.send(orjson.dumps(request) + b"\n")
        chunks = 0
        while True:
            *lines, self.buffer = (self.buffer + await self.process.stdout.receive(65536)).split(
                b"\n"
            )
            for line in lines:
                message = orjson.loads(line)
                if message.get("id") == self.next_id:
                    return message.get("result"), chunks
                update = message.get("params", {}).get("update", {})
                if update.get("sessionUpdate") == "agent_message_chunk":
                    chunks += len(update["content"]["text"])


async def bench_acp_stream(d: Daemon, rounds: int, chunks: int) -> list[list[Any]]:
    """Chunks per second whose text reached the reader.

    Counted as text, not as events, so that a relay which merged adjacent
    chunks into fewer ``text`` events would be measured fairly.
    """
    prompt = f"go {chunks}"
    characters = len("".join(f"chunk {n} " for n in range(chunks)))
    async with await anyio.open_process([PY, str(CHUNK_AGENT)]) as process:
        direct = DirectAcp(process)
        await direct.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        session, _ = await direct.call("session/new", {"cwd": str(ROOT), "mcpServers": []})

        async def read_directly() -> float:
            start = time.perf_counter()
            block = [{"type": "text", "text": prompt}]
            params = {"sessionId": session["sessionId"], "prompt": block}
            _, seen = await direct.call("session/prompt", params)
            assert seen == characters, seen
            return chunks / (time.perf_counter() - start)

        async with await unix_connect(d.socket, "ws://localhost/", **WS_OPTIONS) as ws:
            await initialized(ws)
            await ws.send(
                orjson.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "agent/open",
                        "params": {"profile": "chunks"},
                    }
                ).decode()
            )
            agent_id = orjson.loads(await ws.recv())["result"]["agentId"]
            open_coalesced = {"profile": "chunks_coalesced"}
            await ws.send(
                orjson.dumps(
                    {"jsonrpc": "2.0", "id": 2, "method": "agent/open", "params": open_coalesced}
                ).decode()
            )
            coalesced_id = orjson.loads(await ws.recv())["result"]["agentId"]
            ids = iter(range(3, 1 << 30))

            async def through_daemon(target: str = agent_id) -> float:
                request_id = next(ids)
                params = {"agentId": target, "input": prompt}
                frame = {"jsonrpc": "2.0", "id": request_id, "method": "agent/stream"}
                start = time.perf_counter()
                await ws.send(orjson.dumps({**frame, "params": params}).decode())
                seen = 0
                while True:
                    message = orjson.loads(await ws.recv())
                    if message.get("id") == request_id:
                        assert message["result"]["success"], message
                        break
                    event = message["params"]["event"]
                    if event["type"] == "text":
                        seen += len(event["data"])
                assert seen == characters, seen
                return chunks / (time.perf_counter() - start)

            # Diagnostic: the library's ACP layer in this process, no wire relay.
            library = Agent(
                AgentConfig(
                    name="bench",
                    backend=AcpConfig(command=PY, args=(str(CHUNK_AGENT),), fs="none"),
                )
            )

            async def in_process() -> float:
                start = time.perf_counter()
                seen = 0
                async for event in library.stream(prompt):
                    if event.type == "text":
                        seen += len(event.data)
                assert seen == characters, seen
                return chunks / (time.perf_counter() - start)

            async def coalesced() -> float:
                return await through_daemon(coalesced_id)

            try:
                samples = await alternate(
                    [through_daemon, read_directly, in_process, coalesced], rounds
                )
            finally:
                await library.close()
        assert process.stdin is not None
        await process.stdin.aclose()
    a, b, c, merged = (statistics.median(s) for s in samples)
    return [
        [
            f"(c) ACP text chunks/s, agent/stream ({chunks:,} per turn)",
            f"{a:,.0f}/s",
            f"{b:,.0f}/s (agent stdout read directly)",
            a / b,
            ">= 0.8x",
            a / b >= 0.8,
        ],
        [
            "(c) the same, profile with coalesce_text = true",
            f"{merged:,.0f}/s",
            "",
            f"{merged / b:.2f}x",
            "(opt-in)",
            None,
        ],
        [
            "(c) the same through Agent.stream in-process (no daemon)",
            f"{c:,.0f}/s",
            "",
            f"{c / b:.2f}x",
            "(diagnostic)",
            None,
        ],
    ]


# ---------------------------------------------------------------------------
# (d) RSS per idle agent


async def bench_idle_rss(d: Daemon, count: int) -> list[list[Any]]:
    daemon_process = psutil.Process(d.process.pid)
    rows = []
    async with connect(socket=d.socket) as client:
        for profile in ("echo", "chunks"):
            for _ in range(5):  # warm-up: code paths and first allocations
                await (await client.open(profile)).close()
            await client.status()
            await anyio.sleep(0.2)
            before = daemon_process.memory_info().rss
            for _ in range(count):
                await client.open(profile)
            await client.status()
            await anyio.sleep(0.2)
            after = daemon_process.memory_info().rss
            per_agent = (after - before) / count / 1024
            kind = "llm echo" if profile == "echo" else "acp, not spawned"
            rows.append(
                [
                    f"(d) daemon RSS per idle agent ({count} {kind})",
                    f"{per_agent:.1f} KB",
                    f"{before / 2**20:.1f} MiB RSS before",
                    "",
                    "< 200 KB",
                    per_agent < 200,
                ]
            )
    return rows


# ---------------------------------------------------------------------------
# (e) start-up


async def bench_startup(rounds: int) -> list[list[Any]]:
    to_file: list[float] = []
    to_init: list[float] = []
    bare: list[float] = []
    for _ in range(rounds):
        start = time.perf_counter()
        await anyio.run_process([PY, "-c", "pass"])
        bare.append(time.perf_counter() - start)
        with tempfile.TemporaryDirectory(prefix="omab-start-", dir="/tmp") as name:
            folder = Path(name)
            config = folder / "config.toml"
            config.write_text(CONFIG.replace("{folder}", str(folder)))
            env = {**os.environ, "XDG_STATE_HOME": str(folder / "state")}
            discovery = folder / "bridge.json"
            start = time.perf_counter()
            process = subprocess.Popen(  # noqa: ASYNC220 - timed from the fork on
                [PY, "-m", "oma_bridge.cli", "serve", "--config", str(config)],
                env=env,
                stderr=subprocess.DEVNULL,
            )
            try:
                while not discovery.exists():  # noqa: ASYNC110 - a file of another process
                    await anyio.sleep(0.001)
                to_file.append(time.perf_counter() - start)
                async with connect(discovery_dir=folder):
                    to_init.append(time.perf_counter() - start)
            finally:
                process.send_signal(signal.SIGTERM)
                await anyio.to_thread.run_sync(process.wait, 20)
    base = statistics.median(bare)
    rows = []
    for what, samples in (("discovery file written", to_file), ("first initialize", to_init)):
        value = statistics.median(samples)
        rows.append(
            [
                f"(e) `serve` to ready: {what}",
                f"{value * 1e3:.0f} ms",
                f"{base * 1e3:.0f} ms (python -c pass)",
                value / base,
                "<= 250 ms",
                value <= 0.25,
            ]
        )
    return rows


# ---------------------------------------------------------------------------
# (f) the journal on the relay, (g) a replay of 10,000 entries


class Raw:
    """One raw websockets connection speaking the protocol by hand (ids from 1)."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.next_id = 0

    async def request(self, method: str, params: Any) -> tuple[Any, int]:
        """Send one request; read until its answer; return (result, text events seen)."""
        self.next_id += 1
        frame = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        await self.ws.send(orjson.dumps(frame).decode())
        events = 0
        while True:
            message = orjson.loads(await self.ws.recv())
            if message.get("id") == self.next_id:
                assert "result" in message, message
                return message["result"], events
            events += 1


@asynccontextmanager
async def raw(d: Daemon) -> AsyncIterator[Raw]:
    async with await unix_connect(d.socket, "ws://localhost/", **WS_OPTIONS) as ws:
        yield Raw(await initialized(ws))


#: The watcher of (f), a process of its own: it follows an agent and prints a
#: line at each run's end (argv: socket, agent id).
WATCHER = """
import asyncio, sys, orjson
from websockets.asyncio.client import unix_connect

async def main(socket, agent_id):
    async with unix_connect(socket, "ws://localhost/", max_size=None, compression=None) as ws:
        async def call(ident, method, params):
            message = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
            await ws.send(orjson.dumps(message), text=True)
            await ws.recv()

        info = {"name": "bench-watcher", "version": "0"}
        await call(0, "initialize", {"protocolVersion": 1, "clientInfo": info})
        await call(1, "agent/watch", {"agentId": agent_id})
        print("watching", flush=True)
        async for frame in ws:
            if '"run_end"' in frame:
                print("end", flush=True)

asyncio.run(main(*sys.argv[1:]))
"""


async def bench_journal(rounds: int, words: int, profile_dir: Path | None) -> list[list[Any]]:
    text = " ".join(f"w{k}" for k in range(words))
    async with (
        daemon(profile_dir, "-off", "persist_sessions = false") as off,
        daemon(profile_dir, "-on", "persist_sessions = true") as on,
        raw(off) as plain,
        raw(off) as watched_stream,
        raw(on) as persisted,
    ):
        agents = {}
        for name, client in (("plain", plain), ("watched", watched_stream), ("on", persisted)):
            agents[name] = (await client.request("agent/open", {"profile": "echo"}))[0]["agentId"]
        watcher = await anyio.open_process(
            [PY, "-c", WATCHER, off.socket, agents["watched"]], stderr=subprocess.DEVNULL
        )
        assert watcher.stdout is not None
        lines = anyio.streams.text.TextReceiveStream(watcher.stdout)
        ends = anyio.Event()
        ends_seen = 0

        async def follow() -> None:  # the watcher's lines: "watching", then one per run end
            nonlocal ends, ends_seen
            async for chunk in lines:
                ends_seen += chunk.count("end")
                ends.set()
                ends = anyio.Event()

        assert "watching" in await lines.receive()  # the watch is answered: rounds may start

        cpu: dict[str, list[float]] = {"plain": [], "watched": [], "on": []}
        processes = {"plain": off, "watched": off, "on": on}

        def daemon_cpu(name: str) -> float:
            times = psutil.Process(processes[name].process.pid).cpu_times()
            return float(times.user + times.system)

        def streaming(client: Raw, name: str) -> Callable[[], Awaitable[float]]:
            async def measure() -> float:
                before = ends_seen
                cpu_before = daemon_cpu(name)
                start = time.perf_counter()
                result, events = await client.request(
                    "agent/stream", {"agentId": agents[name], "input": text}
                )
                elapsed = time.perf_counter() - start
                assert result["success"] and events == words + 1, events  # + done
                while name == "watched" and ends_seen == before:
                    await ends.wait()  # untimed: the next round starts with the watcher idle
                cpu[name].append((daemon_cpu(name) - cpu_before) / words)
                return words / elapsed

            return measure

        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            samples = await alternate(
                [
                    streaming(plain, "plain"),
                    streaming(watched_stream, "watched"),
                    streaming(persisted, "on"),
                ],
                rounds,
            )
            base, with_watcher, with_persistence = (statistics.median(s) for s in samples)
            # (g): the plain agent's journal holds its newest 10,000 entries now.
            latest = (await plain.request("agent/watch", {"agentId": agents["plain"]}))[0]["seq"]
            await plain.request("agent/unwatch", {"agentId": agents["plain"]})
            replays = []
            async with raw(off) as replayer:
                for _ in range(rounds):
                    params = {"agentId": agents["plain"], "afterSeq": latest - 10_000}
                    start = time.perf_counter()
                    _, sent = await replayer.request("agent/watch", params)
                    replays.append(time.perf_counter() - start)
                    assert sent == 10_000, sent
                    await replayer.request("agent/unwatch", {"agentId": agents["plain"]})
            tg.cancel_scope.cancel()
        watcher.kill()
        await watcher.wait()
    replay = statistics.median(replays)
    live = 10_000 / base
    per_event = {name: statistics.median(values) * 1e6 for name, values in cpu.items()}
    return [
        [
            f"(f) echo agent/stream text events/s ({words:,} a run), a watcher following",
            f"{with_watcher:,.0f}/s",
            f"{base:,.0f}/s (no watcher, persist_sessions = false)",
            with_watcher / base,
            ">= 0.90x",
            with_watcher / base >= 0.9,
        ],
        [
            "(f) the same, persist_sessions = true (no watcher)",
            f"{with_persistence:,.0f}/s",
            f"{base:,.0f}/s (the same baseline)",
            with_persistence / base,
            ">= 0.90x",
            with_persistence / base >= 0.9,
        ],
        [
            "(f) daemon CPU per event, a watcher following",
            f"{per_event['watched']:.1f} us",
            f"{per_event['plain']:.1f} us (no watcher, persist_sessions = false)",
            per_event["watched"] / per_event["plain"],
            "(diagnostic)",
            None,
        ],
        [
            "(f) daemon CPU per event, persist_sessions = true",
            f"{per_event['on']:.1f} us",
            f"{per_event['plain']:.1f} us (the same baseline)",
            per_event["on"] / per_event["plain"],
            "(diagnostic)",
            None,
        ],
        [
            "(g) agent/watch replay of 10,000 entries (to its answer)",
            f"{replay * 1e3:.0f} ms",
            f"{live * 1e3:.0f} ms (10,000 events live, (f)'s baseline)",
            replay / live,
            "(diagnostic)",
            None,
        ],
    ]


# ---------------------------------------------------------------------------


def print_profile(path: Path, limit: int = 25) -> None:
    print(f"\n### cProfile of the daemon ({path.name}), by own time\n")
    stats = pstats.Stats(str(path))
    stats.sort_stats("tottime").print_stats(limit)
    stats.sort_stats("cumulative").print_stats(limit)


async def main(
    rounds: int, chunks: int, agents: int, profile_dir: Path | None, only: str, words: int
) -> None:
    rows: list[list[Any]] = []
    if set(only) & set("abc"):
        async with daemon(profile_dir, "-abc") as d:
            if "a" in only:
                rows += await bench_status(d, rounds)
            if "b" in only:
                rows += await bench_cat(d, rounds)
            if "c" in only:
                rows += await bench_acp_stream(d, rounds, chunks)
    if "d" in only:
        async with daemon() as d:  # a fresh daemon: its RSS is not shaped by the runs above
            rows += await bench_idle_rss(d, agents)
    if "e" in only:
        rows += await bench_startup(rounds)
    if set(only) & set("fg"):
        rows += await bench_journal(rounds, words, profile_dir)
    print(f"{machine()}; {rounds} alternating rounds per pair; daemon in a subprocess")
    print()
    print_table(
        ["measurement", "oma-bridge", "baseline", "ratio", "target", "met"],
        [
            [
                *row[:3],
                f"{row[3]:.2f}x" if isinstance(row[3], float) else row[3],
                row[4],
                "-" if row[5] is None else "yes" if row[5] else "NO",
            ]
            for row in rows
        ],
    )
    if profile_dir is not None:
        for tag in ("-abc", "-off", "-on"):
            if (profile_dir / f"daemon{tag}.prof").exists():
                print_profile(profile_dir / f"daemon{tag}.prof")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--words", type=int, default=20_000, help="words of an (f) stream")
    parser.add_argument("--only", default="abcdefg", help="the measurements to run (letters)")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="cProfile the daemon")
    arguments = parser.parse_args()
    if arguments.profile is not None:
        arguments.profile.mkdir(parents=True, exist_ok=True)
    anyio.run(
        main,
        arguments.rounds,
        arguments.chunks,
        arguments.agents,
        arguments.profile,
        arguments.only,
        arguments.words,
    )
