"""Hypothesis-generated JSON-RPC frames against a live daemon (issue 8, fuzz).

Every frame gets a well-formed answer (a result or a JSON-RPC error) or, for
a notification, none; the connection stays usable (a sentinel request sent
after the frame is answered); a fresh connection is served; and nothing is
logged at error level.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.sync.client import ClientConnection, unix_connect

from oma_bridge.server.config import parse_config
from oma_bridge.server.daemon import run_daemon

CONFIG = """
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"

[agents.cat]
kind = "process"
command = "cat"
"""

METHODS = [
    "initialize",
    "agents/list",
    "agent/open",
    "agent/run",
    "agent/stream",
    "agent/prompt",
    "agent/history",
    "agent/reset",
    "agent/close",
    "agent/attach",
    "run/cancel",
    "oma/runAgent",
    "daemon/status",
    "$/cancel_request",
    "no/such/method",
    "",
]


class LiveDaemon:
    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="omab-fuzz-", dir="/tmp"))
        self.socket = self.folder / "bridge.sock"
        self.token = ""
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=anyio.run, args=(self._main,), daemon=True)

    async def _main(self) -> None:
        text = f'[server]\nsocket = "{self.socket}"\nmax_message_bytes = 2097152\n{CONFIG}'
        config = parse_config(text, source="fuzz.toml", base_dir=self.folder)
        async with anyio.create_task_group() as tg:
            running = await tg.start(
                lambda task_status: run_daemon(
                    config, state_dir=self.folder / "state", task_status=task_status
                )
            )
            self.token = running.token
            self._ready.set()
            await anyio.to_thread.run_sync(self._stop.wait)
            running.stop()

    def __enter__(self) -> LiveDaemon:
        self._thread.start()
        assert self._ready.wait(20), "the daemon did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(20)
        shutil.rmtree(self.folder, ignore_errors=True)

    @contextmanager
    def connect(self) -> Iterator[ClientConnection]:
        with unix_connect(
            str(self.socket), "ws://localhost/", max_size=None, open_timeout=10
        ) as ws:
            init = {"protocolVersion": 1, "clientInfo": {"name": "fuzz", "version": "0"}}
            send(ws, {"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": init})
            assert answer_to(ws, "init")["result"]["protocolVersion"] == 1
            yield ws


def send(ws: ClientConnection, message: Any) -> None:
    ws.send(orjson.dumps(message).decode())


def answer_to(
    ws: ClientConnection, request_id: Any, seen: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    while True:
        frame = orjson.loads(ws.recv(timeout=30))
        check_frame(frame)
        if seen is not None:
            seen.append(frame)
        if "method" not in frame and frame.get("id") == request_id:
            return frame  # type: ignore[no-any-return]


def check_frame(frame: Any) -> None:
    """Whatever the daemon sends is a well-formed JSON-RPC 2.0 object."""
    assert isinstance(frame, dict) and frame.get("jsonrpc") == "2.0", frame
    if "method" in frame:
        assert isinstance(frame["method"], str)
        return
    assert "id" in frame
    assert ("result" in frame) != ("error" in frame), frame
    if "error" in frame:
        error = frame["error"]
        assert isinstance(error["code"], int) and isinstance(error["message"], str)
        assert error["code"] != -32603, (
            f"an internal error (a bug) answered a fuzzed frame: {frame}"
        )


@pytest.fixture(scope="module")
def live() -> Iterator[LiveDaemon]:
    with LiveDaemon() as daemon:
        yield daemon


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=50),
)
json_value = st.recursive(
    json_leaf,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=30,
)
hostile_params = st.one_of(
    json_value,
    st.fixed_dictionaries(
        {},
        optional={
            "agentId": st.one_of(st.just("AGENT"), st.text(max_size=20), json_value),
            "profile": st.sampled_from(["echo", "cat", "nope", ""]) | json_value,
            "input": st.one_of(
                st.text(max_size=200),
                json_value,
                st.just([{"role": "user", "content": [{"type": "text", "text": "hi"}]}]),
            ),
            "runId": st.one_of(st.text(min_size=1, max_size=20), json_value),
            "config": json_value
            | st.fixed_dictionaries(
                {"profile": st.sampled_from(["echo", "cat"])},
                optional={"name": json_value, "command": st.just("sh")},
            ),
            "protocolVersion": json_value,
        },
    ),
)
envelopes = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0"), "method": st.sampled_from(METHODS) | st.text(max_size=30)},
    optional={
        "id": st.one_of(st.integers(0, 10**6), st.text(min_size=1, max_size=10)),
        "params": hostile_params,
    },
)
broken_envelopes = st.one_of(
    json_value,
    st.dictionaries(
        st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error"]), json_value
    ),
)
raw_texts = st.one_of(
    st.text(max_size=200),
    st.just("{"),
    st.just("[]"),
    st.just("[1,2]"),
    st.just('{"jsonrpc":"2.0","id":1'),
    st.integers(1000, 5000).map(lambda depth: "[" * depth + "]" * depth),
    st.integers(1, 400).map(
        lambda n: (
            '{"jsonrpc":"2.0","id":1,"method":"agent/run","params":{"agentId":"x","input":'
            + "9" * n
            + "}}"
        )
    ),
    st.just('{"jsonrpc":"2.0","id":1,"method":"agent/run","params":{"input":1e400}}'),
    st.integers(10_000, 1_500_000).map(
        lambda n: orjson.dumps(
            {"jsonrpc": "2.0", "id": 7, "method": "agents/list", "params": {"pad": "x" * n}}
        ).decode()
    ),
)


def fill_agent(value: Any, agent_id: str) -> Any:
    if value == "AGENT":
        return agent_id
    if isinstance(value, dict):
        return {k: fill_agent(v, agent_id) for k, v in value.items()}
    return value


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(frame=st.one_of(envelopes, broken_envelopes.map(orjson.dumps).map(bytes.decode), raw_texts))
def test_fuzzed_frames_get_proper_answers(
    live: LiveDaemon, frame: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    with live.connect() as ws:
        send(
            ws,
            {"jsonrpc": "2.0", "id": "open", "method": "agent/open", "params": {"profile": "echo"}},
        )
        agent_id = answer_to(ws, "open")["result"]["agentId"]
        if isinstance(frame, dict):
            frame = fill_agent(frame, agent_id)
            ws.send(orjson.dumps(frame).decode())
        else:
            ws.send(frame)
        seen: list[dict[str, Any]] = []
        send(ws, {"jsonrpc": "2.0", "id": "sentinel", "method": "daemon/status"})
        assert "result" in answer_to(ws, "sentinel", seen)
        answered = [f.get("id") for f in seen]
        is_request = (
            isinstance(frame, dict) and "id" in frame and isinstance(frame.get("method"), str)
        )
        if is_request and frame["id"] not in answered:
            answer_to(ws, frame["id"])  # pipelined: it may come after the sentinel
    with live.connect() as fresh:
        send(fresh, {"jsonrpc": "2.0", "id": 1, "method": "agents/list"})
        assert answer_to(fresh, 1)["result"]["agents"]
    errors = [
        r for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("oma_bridge")
    ]
    assert errors == [], [r.getMessage() for r in errors]
