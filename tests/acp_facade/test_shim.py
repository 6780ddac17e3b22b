"""``oma-bridge acp <profile>`` itself: finding (or starting) a daemon, stdout, stdin's end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from .harness import (
    Facade,
    wait_for_discovery,
    wait_until_idle,
)

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "t"}},
}
LIST = {"jsonrpc": "2.0", "id": "list-1", "method": "session/list", "params": {}}


@dataclass
class ShimRun:
    returncode: int
    messages: list[dict[str, Any]]
    stderr: str
    seconds: float

    def answer(self, request_id: object) -> dict[str, Any]:
        [found] = [m for m in self.messages if m.get("id") == request_id and "method" not in m]
        return found


def run_shim(
    argv: list[str],
    env: dict[str, str],
    *messages: dict[str, Any],
    stdin: Any = subprocess.PIPE,
    timeout_s: float = 30,
) -> ShimRun:
    """Run the shim with ``messages`` on stdin, then its end; all of stdout must be JSON-RPC."""
    started = time.monotonic()
    process = subprocess.Popen(
        argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    data = "".join(json.dumps(m) + "\n" for m in messages).encode() if messages else None
    try:
        stdout, stderr = process.communicate(data, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        raise AssertionError(f"the shim did not exit; stderr:\n{stderr.decode()}") from None
    lines = stdout.decode().splitlines()
    parsed = [json.loads(line) for line in lines]  # nothing but JSON on stdout...
    assert all(m.get("jsonrpc") == "2.0" for m in parsed), lines  # ...and JSON-RPC at that
    return ShimRun(process.returncode, parsed, stderr.decode(), time.monotonic() - started)


def test_no_autostart_answers_initialize_with_the_cause(
    facade: Facade, no_daemon: dict[str, str]
) -> None:
    run = run_shim(facade.shim("echo", "--no-autostart"), no_daemon, INITIALIZE)
    assert run.returncode == 3
    error = run.answer(0)["error"]
    assert error["code"] == -32000  # PROTOCOL §18.3: not -32603, an internal error
    assert error["message"].startswith("oma-bridge: no daemon is running (no ")
    assert error["data"] == {"name": "Unreachable", "details": error["message"]}
    assert no_daemon["XDG_RUNTIME_DIR"] in error["message"]  # where it looked
    assert "no daemon is running" in run.stderr
    runtime = Path(no_daemon["XDG_RUNTIME_DIR"])
    assert not (runtime / "oma-bridge" / "bridge.json").exists()  # nothing was started


def test_autostart_starts_a_daemon_that_stays(facade: Facade, no_daemon: dict[str, str]) -> None:
    run = run_shim(facade.shim("echo"), no_daemon, INITIALIZE, LIST)
    assert run.returncode == 0, run.stderr
    assert run.answer(0)["result"]["agentInfo"]["name"] == "oma-bridge/echo"
    assert run.answer("list-1")["result"] == {"sessions": []}
    assert "starting one" in run.stderr and "started a daemon" in run.stderr
    runtime = Path(no_daemon["XDG_RUNTIME_DIR"])
    pid = wait_for_discovery(runtime, None)
    daemon = psutil.Process(pid)
    assert "serve" in daemon.cmdline()
    assert daemon.status() != psutil.STATUS_ZOMBIE  # it outlived the shim that started it
    assert os.getsid(pid) != os.getsid(0)  # detached into a session of its own
    # A second shim uses that daemon; it starts no other.
    again = run_shim(facade.shim("echo"), no_daemon, INITIALIZE)
    assert again.returncode == 0 and "starting" not in again.stderr
    assert wait_for_discovery(runtime, None) == pid
    os.kill(pid, signal.SIGTERM)
    _, alive = psutil.wait_procs([daemon], timeout=15)
    assert not alive
    log = Path(no_daemon["XDG_STATE_HOME"]) / "oma-bridge" / "daemon.log"
    assert "oma-bridge stopped" in log.read_text()


def test_an_unknown_profile_is_named(facade: Facade) -> None:
    run = run_shim(facade.shim("nope"), facade.env, INITIALIZE)
    assert run.returncode == 2
    error = run.answer(0)["error"]
    assert error["message"] == 'oma-bridge: the daemon has no agent profile named "nope"'
    assert error["code"] == -32011
    assert error["data"] == {"name": "NotFound", "details": error["message"]}


def test_answers_still_come_after_stdin_ends(facade: Facade, tmp_path: Path) -> None:
    """A client that writes its requests and closes stdin (a pipe, a file) gets the answers."""
    piped = run_shim(facade.shim("echo"), facade.env, INITIALIZE, LIST)
    assert piped.returncode == 0
    assert "result" in piped.answer(0) and "result" in piped.answer("list-1")
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps(INITIALIZE) + "\n")
    with requests.open("rb") as file:
        from_file = run_shim(facade.shim("echo"), facade.env, stdin=file)
    assert from_file.returncode == 0, from_file.stderr
    assert "result" in from_file.answer(0)
    with Path(os.devnull).open("rb") as null:
        nothing = run_shim(facade.shim("echo"), facade.env, stdin=null)
    assert nothing.returncode == 0 and nothing.messages == []
    assert nothing.seconds < 5  # no request pending: it does not wait


def test_a_turn_in_flight_when_stdin_ends_goes_on(facade: Facade) -> None:
    prompt = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "session/prompt",
        "params": {"sessionId": "", "prompt": [{"type": "text", "text": "/wait 4"}]},
    }
    process = subprocess.Popen(
        facade.shim("demo"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=facade.env,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        new = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "session/new",
            "params": {"cwd": str(facade.work), "mcpServers": []},
        }
        for message in (INITIALIZE, new):
            process.stdin.write(json.dumps(message).encode() + b"\n")
        process.stdin.flush()
        process.stdout.readline()
        session_id = json.loads(process.stdout.readline())["result"]["sessionId"]
        prompt["params"]["sessionId"] = session_id
        process.stdin.write(json.dumps(prompt).encode() + b"\n")
        process.stdin.flush()
        first = json.loads(process.stdout.readline())  # the turn is under way
        assert first["params"]["update"]["content"]["text"].startswith("Waiting 4 s")
        started = time.monotonic()
        process.stdin.close()
        assert process.wait(timeout=10) == 0
        assert time.monotonic() - started < 4  # the shim did not wait for the turn
    finally:
        process.kill()
        process.wait()
    wait_until_idle(facade)
    log = facade.log()
    assert f"ACP session {session_id} opened" in log
    assert "agent " + session_id + " closed" not in log  # detached, not closed


def test_the_shim_ends_when_the_daemon_does(facade: Facade) -> None:
    process = subprocess.Popen(
        facade.shim("echo"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=facade.env,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
        process.stdin.flush()
        assert "result" in json.loads(process.stdout.readline())
        facade.process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 1
        assert process.stderr is not None
        assert "the daemon closed the connection" in process.stderr.read().decode()
    finally:
        process.kill()
        process.wait()
