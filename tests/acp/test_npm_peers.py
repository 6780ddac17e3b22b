"""Real third-party ACP peers from npm, before the daemon serves ACP itself.

* The npm cache of ``support/npm_peers.py``, against a fake ``npm`` (no network).
* The TypeScript client (``tests/agents/acp_ts_client.mjs``, on the official SDK)
  driving the TypeScript chunk agent and the Python demo agent over stdio, and
  the chunk agent over a websocket (a small relay stands in for ``/acp/<profile>``).
* ``acpx`` (openclaw/acpx), a headless ACP client CLI, against the demo agent.

Skipped, with the reason, where node, npm or the registry is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from support import npm_peers
from support.acpx import run_acpx
from support.npm_peers import NpmPackage, NpmUnavailable, install_package
from support.ts_client import TS_CHUNK_AGENT, run_ts_client
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from oma_bridge.demo.acp_agent import AGENT_NAME, reply_chunks

DEMO_AGENT = [sys.executable, "-m", "oma_bridge.demo.acp_agent"]

# ---------------------------------------------------------------- the npm cache (fake npm)

FAKE_NPM = """#!{python}
import json, os, pathlib, sys, time
with open(os.environ["FAKE_NPM_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
mode = os.environ.get("FAKE_NPM_MODE", "ok")
if mode == "fail":
    print("npm error code E404")
    print("npm error 404 Not Found - GET https://registry.example/nope - Not found")
    print("npm error")
    print("npm error If you are behind a proxy, please make sure that the 'proxy' config is set.")
    print("npm error A complete log of this run can be found in: /tmp/x.log")
    sys.exit(1)
if mode == "hang":
    time.sleep(60)
time.sleep(float(os.environ.get("FAKE_NPM_DELAY", "0")))
if mode != "empty":
    prefix = pathlib.Path(sys.argv[sys.argv.index("--prefix") + 1])
    name, _, version = sys.argv[-1].rpartition("@")
    folder = prefix / "node_modules" / name
    folder.mkdir(parents=True)
    (folder / "package.json").write_text(json.dumps({{"name": name, "version": version}}))
"""

PKG = NpmPackage("@scope/fake", "1.2.3")


@pytest.fixture
def fake_npm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake ``npm`` first on PATH; returns the log of its invocations (one JSON argv a line)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text(FAKE_NPM.format(python=sys.executable))
    npm.chmod(0o755)
    log = tmp_path / "npm.log"
    log.touch()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NPM_LOG", str(log))
    return log


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_install_runs_npm_once_then_uses_the_marker(fake_npm: Path, tmp_path: Path) -> None:
    root = tmp_path / "cache"
    folder = install_package(PKG, root=root)
    assert folder == root / "scope+fake-1.2.3"
    assert (folder / npm_peers.MARKER).is_file()
    assert install_package(PKG, root=root) == folder
    [argv] = calls(fake_npm)
    assert argv[:3] == ["install", "--prefix", str(folder)]
    assert {"--no-audit", "--no-fund", "--prefer-offline"} <= set(argv)
    assert argv[-1] == "@scope/fake@1.2.3"


def test_cache_root_follows_oma_npm_cache(
    fake_npm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMA_NPM_CACHE", str(tmp_path / "elsewhere"))
    assert install_package(PKG) == tmp_path / "elsewhere" / "scope+fake-1.2.3"


def test_parallel_installs_share_one_npm_run(
    fake_npm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NPM_DELAY", "0.5")
    folders: list[Path] = []
    threads = [
        threading.Thread(target=lambda: folders.append(install_package(PKG, root=tmp_path)))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(folders) == 3 and len(set(folders)) == 1
    assert len(calls(fake_npm)) == 1


def test_failed_install_says_why_and_leaves_no_marker(
    fake_npm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NPM_MODE", "fail")
    with pytest.raises(NpmUnavailable) as failure:
        install_package(PKG, root=tmp_path)
    message = str(failure.value)
    assert "npm install --prefix" in message and "@scope/fake@1.2.3" in message
    assert message.endswith("E404: 404 Not Found - GET https://registry.example/nope - Not found")
    assert not (tmp_path / "scope+fake-1.2.3").exists()
    monkeypatch.setenv("FAKE_NPM_MODE", "ok")  # a later session retries, and succeeds
    assert (install_package(PKG, root=tmp_path) / npm_peers.MARKER).is_file()


def test_error_summary_of_an_unreachable_registry() -> None:
    output = """npm error code ECONNREFUSED
npm error syscall connect
npm error errno ECONNREFUSED
npm error FetchError: request to http://127.0.0.1:9/x failed, reason: connect ECONNREFUSED
npm error     at ClientRequest.<anonymous> (/usr/lib/node_modules/npm/index.js:130:14)
npm error   code: 'ECONNREFUSED',
npm error }
npm error
npm error If you are behind a proxy, please make sure that the 'proxy' config is set properly.
npm error A complete log of this run can be found in: /tmp/npm.log
"""
    assert npm_peers._error_summary(output) == (  # noqa: SLF001 — the summary rule on npm's own output, with no npm run
        "ECONNREFUSED: FetchError: request to http://127.0.0.1:9/x failed, "
        "reason: connect ECONNREFUSED"
    )
    assert npm_peers._error_summary("boom\nlast words\n") == "last words"  # noqa: SLF001 — the summary rule on npm's own output, with no npm run


def test_install_that_leaves_no_package_fails(
    fake_npm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NPM_MODE", "empty")
    with pytest.raises(NpmUnavailable, match=r"succeeded but @scope/fake@1\.2\.3 is not in"):
        install_package(PKG, root=tmp_path)


def test_install_time_limit(
    fake_npm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NPM_MODE", "hang")
    with pytest.raises(NpmUnavailable, match="timed out after 1 s"):
        install_package(PKG, root=tmp_path, timeout_s=1)


def test_no_npm_skips_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no npm, no node
    monkeypatch.setenv("OMA_NPM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(npm_peers, "_failures", {})
    with pytest.raises(NpmUnavailable, match="npm is not on PATH"):
        install_package(PKG)
    with pytest.raises(pytest.skip.Exception, match=r"@scope/fake@1\.2\.3 unavailable: npm is"):
        npm_peers.require_package(PKG)
    with pytest.raises(pytest.skip.Exception, match="node is not on PATH"):
        npm_peers.require_node()


# ---------------------------------------------------------------- the TS client over stdio


def chunk_agent(sdk_dir: Path) -> dict[str, Any]:
    node = npm_peers.require_node()
    return {"agent": [node, str(TS_CHUNK_AGENT)], "env": {"OMA_ACP_TS_SDK_DIR": str(sdk_dir)}}


@pytest.mark.anyio
async def test_ts_client_drives_ts_chunk_agent(acp_ts_sdk: Path, tmp_path: Path) -> None:
    script = {
        **chunk_agent(acp_ts_sdk),
        "cwd": str(tmp_path),
        "steps": [
            {"op": "initialize"},
            {"op": "new"},
            {"op": "prompt", "text": "chunks 100"},
            {"op": "prompt", "text": "ask"},
            {"op": "prompt", "text": "ask", "permission": "reject"},
        ],
    }
    run = await run_ts_client(script, timeout_s=30)
    assert run.ok, run.describe()
    assert run.result("initialize")["agentInfo"]["name"] == "ts-chunk-agent"
    session = run.result("session/new")["sessionId"]
    assert {line["sessionId"] for line in run.of("update")} == {session}
    chunks = run.chunks()
    assert chunks[:100] == [f"{i}\n" for i in range(100)]  # all of them, in order
    assert [r["result"]["stopReason"] for r in run.responses("session/prompt")] == ["end_turn"] * 3
    assert [p["outcome"] for p in run.of("permission")] == [
        {"outcome": "selected", "optionId": "allow-once"},
        {"outcome": "selected", "optionId": "reject-once"},
    ]
    assert chunks[100:] == ["permission: allow-once", "permission: reject-once"]
    # the first prompt's 100 updates all came before its response
    kinds = [line["type"] for line in run.lines]
    assert kinds.index("response", kinds.index("update")) > kinds.index("update") + 99


@pytest.mark.anyio
async def test_ts_client_cancels_after_k_chunks(acp_ts_sdk: Path, tmp_path: Path) -> None:
    script = {
        **chunk_agent(acp_ts_sdk),
        "cwd": str(tmp_path),
        "steps": [
            {"op": "initialize"},
            {"op": "new"},
            {"op": "prompt", "text": "slow 100 50", "cancelAfter": 3},
            {"op": "prompt", "text": "echo after the cancel"},
        ],
    }
    run = await run_ts_client(script, timeout_s=30)
    assert run.ok, run.describe()
    [sent] = run.of("cancel_sent")
    assert sent["afterChunks"] == 3
    stops = [r["result"]["stopReason"] for r in run.responses("session/prompt")]
    assert stops == ["cancelled", "end_turn"]
    chunks = run.chunks()
    assert 3 <= len(chunks) - 1 < 100 and chunks[-1] == "echo after the cancel"


@pytest.mark.anyio
async def test_ts_client_held_permission_is_withdrawn_by_cancel(
    acp_ts_sdk: Path, tmp_path: Path
) -> None:
    script = {
        **chunk_agent(acp_ts_sdk),
        "cwd": str(tmp_path),
        "permission": "hold",
        "steps": [
            {"op": "initialize"},
            {"op": "new"},
            {"op": "prompt", "text": "ask", "wait": False},
            {"op": "until", "type": "request", "method": "session/request_permission"},
            {"op": "cancel"},
            {"op": "wait"},
        ],
    }
    run = await run_ts_client(script, timeout_s=30)
    assert run.ok, run.describe()
    [request] = [r for r in run.of("request") if r["method"] == "session/request_permission"]
    assert run.of("withdrawn") == [
        {"type": "withdrawn", "method": "session/request_permission", "id": request["id"]}
    ]
    assert run.result("session/prompt") == {"stopReason": "cancelled"}


@pytest.mark.anyio
async def test_ts_client_images_and_session_methods(acp_ts_sdk: Path, tmp_path: Path) -> None:
    image = {"data": "aGVsbG8=", "mimeType": "image/png"}
    script = {
        **chunk_agent(acp_ts_sdk),
        "cwd": str(tmp_path),
        "steps": [
            {"op": "initialize"},
            {"op": "new"},
            {"op": "prompt", "text": "look: ", "images": [image]},
            {"op": "list"},
            {"op": "reconnect"},  # a new agent process: the session is gone with the old one
            {"op": "initialize"},
            {"op": "new"},
            {"op": "prompt", "text": "chunks 2"},
            {"op": "load"},
            {"op": "list", "cwd": str(tmp_path)},
            {"op": "close"},
            {"op": "prompt", "text": "after close"},
        ],
    }
    run = await run_ts_client(script, timeout_s=30)
    assert run.returncode == 1, run.describe()  # the last step fails, as it should
    failed = [line for line in run.of("step") if not line["ok"]]
    assert [(line["index"], line["code"]) for line in failed] == [(11, -32602)]
    assert run.chunks()[0] == "look: [image image/png 8b]"
    assert len(run.of("agent_exit")) == 2
    first, second = (r["result"]["sessionId"] for r in run.responses("session/new"))
    assert first == second == "chunk-1"  # a fresh agent counts from 1 again
    assert [s["sessionId"] for s in run.result("session/list", 0)["sessions"]] == [first]
    # session/load replayed the one turn of the second agent before answering
    load_at = next(i for i, line in enumerate(run.lines) if line.get("method") == "session/load")
    replay = [line["update"] for line in run.lines[:load_at] if line["type"] == "update"][-2:]
    assert replay == [
        {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "chunks 2"}},
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "0\n1\n"}},
    ]
    assert run.result("session/close") == {}
    assert run.responses("session/prompt")[-1]["error"]["data"]["name"] == "NotFound"


@pytest.mark.anyio
async def test_ts_client_drives_python_demo_agent(acp_ts_sdk: Path, tmp_path: Path) -> None:
    script = {
        "agent": DEMO_AGENT,
        "cwd": str(tmp_path),
        "steps": [{"op": "initialize"}, {"op": "new"}, {"op": "prompt", "text": "hello demo"}],
    }
    run = await run_ts_client(script, timeout_s=30)
    assert run.ok, run.describe()
    assert run.result("initialize")["agentInfo"]["name"] == AGENT_NAME
    session = run.result("session/new")["sessionId"]
    assert run.chunks() == reply_chunks("hello demo", 1, session, 2)
    assert run.updates("usage_update")
    assert run.result("session/prompt") == {"stopReason": "end_turn"}


# ---------------------------------------------------------------- the TS client over a websocket


@contextlib.asynccontextmanager
async def ws_relay(agent: list[str], env: dict[str, str], token: str) -> AsyncIterator[str]:
    """A websocket door like ``/acp/<profile>``: Bearer checked, each frame one line of an agent."""

    def check(connection: ServerConnection, request: Request) -> Response | None:
        if request.headers.get("Authorization") != f"Bearer {token}":
            return connection.respond(HTTPStatus.UNAUTHORIZED, "bad token\n")
        return None

    async def relay(socket: ServerConnection) -> None:
        process = await anyio.open_process(
            agent,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **env},
        )
        async with process, anyio.create_task_group() as group:
            assert process.stdin is not None and process.stdout is not None
            lines = BufferedByteReceiveStream(process.stdout)

            async def down() -> None:
                with contextlib.suppress(anyio.IncompleteRead, anyio.EndOfStream):
                    while True:
                        await socket.send((await lines.receive_until(b"\n", 1 << 25)).decode())
                await socket.close()

            group.start_soon(down)
            with contextlib.suppress(ConnectionClosed):
                async for frame in socket:
                    data = frame if isinstance(frame, bytes) else frame.encode()
                    await process.stdin.send(data + b"\n")
            await process.stdin.aclose()

    # A client offering subprotocols (the test offers acp.v1) must get one selected.
    async with serve(
        relay, "127.0.0.1", 0, process_request=check, subprotocols=[Subprotocol("acp.v1")]
    ) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}/acp/chunks"


@pytest.mark.anyio
async def test_ts_client_over_websocket_with_bearer(acp_ts_sdk: Path, tmp_path: Path) -> None:
    peer = chunk_agent(acp_ts_sdk)
    steps = [{"op": "initialize"}, {"op": "new"}, {"op": "prompt", "text": "chunks 20"}]
    with anyio.fail_after(60):
        async with ws_relay(peer["agent"], peer["env"], "s3cret") as url:
            base = {"url": url, "cwd": str(tmp_path), "protocols": ["acp.v1"], "steps": steps}
            run = await run_ts_client({**base, "token": "s3cret"}, timeout_s=30)
            assert run.ok, run.describe()
            assert run.chunks() == [f"{i}\n" for i in range(20)]
            assert run.result("session/prompt") == {"stopReason": "end_turn"}

            refused = await run_ts_client({**base, "token": "wrong"}, timeout_s=30)
            assert refused.returncode == 1 and not refused.of("update")
            assert [line["ok"] for line in refused.of("step")] == [False, False, False]
            assert "401" in refused.of("step")[0]["error"]  # ws: "Unexpected server response"


# ---------------------------------------------------------------- acpx


def demo_command() -> str:
    return shlex.join(DEMO_AGENT)  # acpx splits --agent like a shell (quotes, backslashes)


def test_acpx_exec_against_demo_agent(acpx: list[str], acpx_home: Path, tmp_path: Path) -> None:
    done = run_acpx(acpx, acpx_home, "--agent", demo_command(), "exec", "hello", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    answer = "".join(reply_chunks("hello", 1, "demo-1", 1))
    assert answer in done.stdout and "[done] end_turn" in done.stdout
    # --format json: the raw ACP messages, one a line
    raw = run_acpx(
        acpx, acpx_home, "--format", "json", "--agent", demo_command(), "exec", "yo", cwd=tmp_path
    )
    messages = [json.loads(line) for line in raw.stdout.splitlines()]
    assert [m.get("method") for m in messages[:1]] == ["initialize"]
    assert messages[0]["params"]["clientInfo"] == {"name": "acpx", "version": "0.19.1"}
    assert messages[-1]["result"] == {"stopReason": "end_turn"}
    assert not list(acpx_home.glob(".acpx/sessions/*.json"))  # exec keeps no session


def test_acpx_permission_flags(acpx: list[str], acpx_home: Path, tmp_path: Path) -> None:
    def tool(*flags: str) -> subprocess.CompletedProcess[str]:
        command = ("--format", "quiet", *flags, "--agent", demo_command(), "exec", "/tool a b c")
        return run_acpx(acpx, acpx_home, *command, cwd=tmp_path)

    approved = tool("--approve-all")
    assert approved.returncode == 0 and "The tool counted 3 words." in approved.stdout
    denied = tool("--deny-all")  # the turn ends normally, but acpx exits 5 (PERMISSION_DENIED)
    assert denied.returncode == 5 and "Permission refused" in denied.stdout
    assert "PERMISSION_DENIED" in denied.stderr
    default = tool()  # no TTY: the default mode (approve-reads) refuses a non-read tool
    assert default.returncode == 5 and "Permission refused" in default.stdout


def test_acpx_persistent_session(acpx: list[str], acpx_home: Path, tmp_path: Path) -> None:
    agent = ("--agent", demo_command())
    created = run_acpx(acpx, acpx_home, *agent, "sessions", "new", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    session = created.stdout.strip()
    record = acpx_home / ".acpx" / "sessions" / f"{session}.json"
    assert json.loads(record.read_text())["cwd"] == str(tmp_path)
    ttl = ("--ttl", "30", "--format", "quiet", *agent)
    first = run_acpx(acpx, acpx_home, *ttl, "prompt", "one two", cwd=tmp_path)
    second = run_acpx(acpx, acpx_home, *ttl, "prompt", "three", cwd=tmp_path)
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    assert "This is turn 1 of session" in first.stdout
    assert "This is turn 2 of session" in second.stdout  # one agent kept alive between them
    listed = run_acpx(acpx, acpx_home, *agent, "sessions", "list", cwd=tmp_path)
    assert listed.stdout.split("\t")[0] == session
    closed = run_acpx(acpx, acpx_home, *agent, "sessions", "close", cwd=tmp_path)
    assert closed.returncode == 0 and json.loads(record.read_text())["closed"] is True
