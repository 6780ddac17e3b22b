"""A real ``oma-bridge serve`` for the facade tests, and the clients that talk to it.

:func:`facade_daemon` starts the daemon as a subprocess with a private
``XDG_RUNTIME_DIR`` (a short 0700 folder under ``/tmp``: a unix socket path
has a length limit), ``XDG_STATE_HOME`` and ``XDG_CONFIG_HOME``, and a config
whose ``workspace_roots`` is the test's work folder.  ``socket = "auto"``,
so the shim (``oma-bridge acp <profile>``, run with :attr:`Facade.env`)
finds it through ``$XDG_RUNTIME_DIR/oma-bridge/bridge.json`` as an editor's
would.  At the end the daemon gets SIGTERM (then SIGKILL), and every process
it had started is killed if it is still there.

:func:`run_sdk_client` runs ``sdk_client.py`` (the official Python SDK's
client side); :class:`RawClient` is a plain websocket JSON-RPC client for
what no SDK will send (malformed blocks, frames before ``initialize``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from support import npm_peers
from support.ts_client import TS_CHUNK_AGENT
from websockets.asyncio.client import ClientConnection, connect, unix_connect

HERE = Path(__file__).resolve().parent
AGENTS = HERE.parent / "agents"
SCENARIO_AGENT = AGENTS / "acp_scenario_agent.py"
SDK_CLIENT = HERE / "sdk_client.py"
#: The venv's ``oma-bridge``: what an editor's agent setting names (absolute).
OMA_BRIDGE = str(Path(sys.executable).with_name("oma-bridge"))
START_TIMEOUT_S = 20.0

#: The profiles every facade daemon serves (``{work}`` and ``{marker}`` filled in).
BASE_AGENTS = """
[agents.echo]
kind = "llm"
description = "echo"
provider = "echo"
model = "echo-1"

[agents.wordcount]
kind = "process"
command = "wc"
args = ["-w"]
env = {{ LC_ALL = "C" }}

[agents.marker]
kind = "process"
description = "writes a marker file when it starts"
command = "@python"
args = ["-c", "import pathlib, sys; pathlib.Path({marker!r}).touch(); print(sys.stdin.read())"]

[agents.demo]
kind = "acp"
command = "@python"
args = ["-m", "oma_bridge.demo.acp_agent"]
cwd = "client"

[agents.scenario]
kind = "acp"
command = "@python"
args = [{scenario!r}]
cwd = "client"
"""

#: The TypeScript SDK agent, when node and the SDK are here.
CHUNKS_AGENT = """
[agents.chunks]
kind = "acp"
command = {node!r}
args = [{agent!r}]
env = {{ OMA_ACP_TS_SDK_DIR = {sdk!r} }}
cwd = "client"
"""


def _ts_chunk_profile() -> str:
    node = shutil.which("node")
    if node is None:
        return ""
    try:
        sdk = npm_peers.install_package(npm_peers.ACP_TS_SDK)
    except npm_peers.NpmUnavailable:
        return ""
    return CHUNKS_AGENT.format(node=node, agent=str(TS_CHUNK_AGENT), sdk=str(sdk))


@dataclass
class Facade:
    """A running daemon and the folders and environment of its clients."""

    process: subprocess.Popen[bytes]
    root: Path
    runtime: Path
    work: Path
    marker: Path
    env: dict[str, str]
    profiles: set[str] = field(default_factory=set)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def state(self) -> Path:
        return Path(self.env["XDG_STATE_HOME"]) / "oma-bridge"

    def discovery(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.runtime / "oma-bridge" / "bridge.json").read_text())
        return data

    @property
    def token(self) -> str:
        return str(self.discovery()["token"])

    @property
    def ws_base(self) -> str:
        return str(self.discovery()["url"]).rstrip("/")

    def shim(self, profile: str, *flags: str) -> list[str]:
        return [OMA_BRIDGE, "acp", *flags, profile]

    def audit(self) -> list[dict[str, Any]]:
        path = self.state / "audit.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def children(self) -> list[psutil.Process]:
        with contextlib.suppress(psutil.Error):
            return psutil.Process(self.pid).children(recursive=True)
        return []

    def log(self) -> str:
        return (self.root / "daemon.log").read_text(errors="replace")

    def restart(self) -> None:
        """Stop the daemon (SIGTERM, a clean stop) and start it again on the same config."""
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(timeout=15) == 0
        with (self.root / "daemon.log").open("ab") as log:
            self.process = subprocess.Popen(
                [OMA_BRIDGE, "serve", "--config", str(self.root / "bridge.toml")],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self.env,
            )
        wait_for_discovery(self.runtime, self.process.pid)

    def require(self, profile: str) -> None:
        import pytest

        if profile not in self.profiles:
            pytest.skip(f"profile {profile!r} needs node and @agentclientprotocol/sdk")

    async def raw(self, profile: str = "", **kwargs: Any) -> RawClient:
        """A :class:`RawClient` on ``/acp/<profile>`` over the unix socket."""
        path = f"/acp/{profile}" if profile else "/acp"
        ws = await unix_connect(
            str(self.discovery()["socket"]),
            f"ws://localhost{path}",
            subprotocols=["acp.v1"],  # type: ignore[list-item]
            **kwargs,
        )
        return RawClient(ws)

    async def raw_tcp(self, profile: str, **kwargs: Any) -> RawClient:
        ws = await connect(f"{self.ws_base}/acp/{profile}", **kwargs)
        return RawClient(ws)


def client_env(root: Path, runtime: Path) -> dict[str, str]:
    """The environment of a daemon and of its shims: private XDG folders."""
    env = {**os.environ}
    env.update(
        XDG_RUNTIME_DIR=str(runtime),
        XDG_STATE_HOME=str(root / "state"),
        XDG_CONFIG_HOME=str(root / "config"),
    )
    return env


def private_runtime_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="omaf-", dir="/tmp"))  # mkdtemp: mode 0700


def stop_process_tree(process: subprocess.Popen[bytes], children: list[psutil.Process]) -> None:
    """SIGTERM, a grace, SIGKILL; then kill whatever it had started that is still there."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.kill()


def wait_for_discovery(runtime: Path, pid: int | None, timeout_s: float = START_TIMEOUT_S) -> int:
    """Wait for ``bridge.json`` to name a daemon (``pid`` when given); return its pid."""
    path = runtime / "oma-bridge" / "bridge.json"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            found = int(json.loads(path.read_text())["pid"])
            if pid is None or found == pid:
                return found
        time.sleep(0.02)
    raise AssertionError(f"no discovery file naming the daemon in {path}")


@contextlib.contextmanager
def facade_daemon(
    root: Path, *, server: str = "", agents: str = "", tcp: str = "127.0.0.1:0"
) -> Iterator[Facade]:
    """Start ``oma-bridge serve`` on a config of :data:`BASE_AGENTS` plus ``agents``."""
    runtime = private_runtime_dir()
    work = root / "work"
    work.mkdir(exist_ok=True)
    marker = root / "marker-started"
    env = client_env(root, runtime)
    text = (
        f'[server]\nsocket = "auto"\ntcp = "{tcp}"\n'
        f"workspace_roots = [{str(work)!r}]\n{server}\n"
        + BASE_AGENTS.format(marker=str(marker), scenario=str(SCENARIO_AGENT))
        + _ts_chunk_profile()
        + agents
    )
    config = root / "bridge.toml"
    config.write_text(text)
    with (root / "daemon.log").open("wb") as log:
        process = subprocess.Popen(
            [OMA_BRIDGE, "serve", "--config", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
        )
    profiles = {
        line[len("[agents.") : -1] for line in text.splitlines() if line.startswith("[agents.")
    }
    facade = Facade(process, root, runtime, work, marker, env, profiles)
    children: list[psutil.Process] = []
    try:
        try:
            wait_for_discovery(runtime, process.pid)
        except AssertionError:
            raise AssertionError(f"the daemon did not start:\n{facade.log()}") from None
        yield facade
    finally:
        children = facade.children()
        stop_process_tree(facade.process, children)  # the one running now (restart)
        shutil.rmtree(runtime, ignore_errors=True)


# ---------------------------------------------------------------- the Python SDK client


@dataclass
class SdkRun:
    """What ``sdk_client.py`` printed."""

    returncode: int
    lines: list[dict[str, Any]]
    stderr: str

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("type") == kind]

    def responses(self, op: str) -> list[dict[str, Any]]:
        return [line for line in self.of("response") if line["op"] == op]

    def result(self, op: str, index: int = -1) -> Any:
        line = self.responses(op)[index]
        assert "result" in line, f"{op} failed: {line.get('error')}\n{self.stderr[-2000:]}"
        return line["result"]

    def error(self, op: str, index: int = -1) -> dict[str, Any]:
        line = self.responses(op)[index]
        assert "error" in line, f"{op} did not fail: {line}"
        return dict(line["error"])

    def updates(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [
            line["update"]
            for line in self.of("update")
            if kind is None or line["update"].get("sessionUpdate") == kind
        ]

    def chunks(self) -> list[str]:
        return [u["content"]["text"] for u in self.updates("agent_message_chunk")]


def run_sdk_client(
    script: Mapping[str, Any], env: Mapping[str, str], *, timeout_s: float = 60.0
) -> SdkRun:
    """Run the Python SDK client on ``script``; its process group is killed at the end."""
    process = subprocess.Popen(
        [sys.executable, str(SDK_CLIENT)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env),
        start_new_session=True,  # the client and the shim it spawns: one group
    )
    try:
        stdout, stderr = process.communicate(json.dumps(script).encode(), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(process.pid)
        stdout, stderr = process.communicate()
        raise AssertionError(
            f"the SDK client did not finish within {timeout_s:.0f}s:\n{stdout.decode()[-3000:]}"
            f"\nstderr:\n{stderr.decode()[-3000:]}"
        ) from None
    finally:
        kill_group(process.pid)
    lines = [json.loads(raw) for raw in stdout.decode().splitlines() if raw.strip()]
    return SdkRun(process.returncode, lines, stderr.decode(errors="replace"))


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


# ---------------------------------------------------------------- a raw websocket client


class RawClient:
    """JSON-RPC over one websocket, by hand: what is sent is exactly what the test wrote."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.seen: list[dict[str, Any]] = []
        self._ids = iter(range(1, 1 << 30))

    async def send(self, message: dict[str, Any] | str) -> None:
        await self.ws.send(message if isinstance(message, str) else json.dumps(message))

    async def receive(self) -> dict[str, Any]:
        message: dict[str, Any] = json.loads(await self.ws.recv())
        self.seen.append(message)
        return message

    async def call(self, method: str, params: Any = None) -> dict[str, Any]:
        """Send a request; return its answer (``result`` or ``error``), keeping what came before."""
        request_id = next(self._ids)
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        while True:
            answer = await self.receive()
            if answer.get("id") == request_id and "method" not in answer:
                return answer

    async def initialize(
        self, name: str = "raw-client", capabilities: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return await self.call(
            "initialize",
            {
                "protocolVersion": 1,
                "clientCapabilities": capabilities or {},
                "clientInfo": {"name": name, "version": "1"},
            },
        )

    async def answer(self, request: dict[str, Any], reply: dict[str, Any]) -> None:
        """Answer a request of the daemon; ``reply``: ``{"result": ...}`` or ``{"error": ...}``."""
        await self.send({"jsonrpc": "2.0", "id": request["id"], **reply})

    async def next_request(self, method: str) -> dict[str, Any]:
        """Read on until the daemon sends a request of ``method``."""
        while True:
            message = await self.receive()
            if message.get("method") == method and "id" in message:
                return message

    async def next_notification(self, method: str) -> dict[str, Any]:
        """Read on until the daemon sends a notification of ``method``."""
        while True:
            message = await self.receive()
            if message.get("method") == method and "id" not in message:
                return message

    async def until_answer(self, request_id: int) -> dict[str, Any]:
        """Read on until the answer to our request ``request_id``."""
        while True:
            message = await self.receive()
            if message.get("id") == request_id and "method" not in message:
                return message

    async def start_prompt(self, session_id: str, *blocks: dict[str, Any]) -> int:
        """Send a ``session/prompt`` without waiting for its answer; its request id."""
        request_id = next(self._ids)
        params = {"sessionId": session_id, "prompt": list(blocks)}
        await self.send(
            {"jsonrpc": "2.0", "id": request_id, "method": "session/prompt", "params": params}
        )
        return request_id

    async def new(self, cwd: Path | str) -> str:
        answer = await self.call("session/new", {"cwd": str(cwd), "mcpServers": []})
        assert "result" in answer, answer
        return str(answer["result"]["sessionId"])

    async def prompt(self, session_id: str, *blocks: dict[str, Any]) -> dict[str, Any]:
        return await self.call("session/prompt", {"sessionId": session_id, "prompt": list(blocks)})

    def updates(self) -> list[dict[str, Any]]:
        return [m["params"]["update"] for m in self.seen if m.get("method") == "session/update"]

    async def close(self) -> None:
        await self.ws.close()


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def daemon_status(facade: Facade) -> dict[str, Any]:
    """``daemon/status`` of the facade's daemon, over its own protocol (from sync code)."""
    import anyio

    from oma_bridge.client import connect

    async def ask() -> dict[str, Any]:
        async with connect(discovery_dir=facade.runtime / "oma-bridge") as client:
            return await client.status()

    return anyio.run(ask)


def agent_pids(facade: Facade, session_id: str) -> list[int]:
    """The pids of the processes the daemon runs for one session (agent)."""
    return [p["pid"] for p in daemon_status(facade)["processes"] if p["agentId"] == session_id]


def wait_until_idle(facade: Facade, timeout_s: float = 20) -> None:
    """Wait until the daemon has no run in flight."""
    deadline = time.monotonic() + timeout_s
    while daemon_status(facade)["runs"]:
        assert time.monotonic() < deadline, "runs still in flight"
        time.sleep(0.1)
