"""Hypothesis-generated ACP agent output against the ACP client (issue 8, fuzz).

A tiny stdio agent (standard library only, :data:`AGENT`) answers
``initialize`` and ``session/new`` properly, then, during the prompt, replays
a generated script of stdout lines: random text and bytes, truncated JSON,
deep nesting, responses with right, wrong, stale and out-of-order ids,
``session/update`` notifications of known, unknown and malformed kinds, and
requests of its own.  The script ends one of four ways: a proper answer, an
error answer, an exit, or a closed stdout.

Every run is driven through the public ``Agent`` API and must end (bounded by
``anyio.fail_after``) with a result; a failure must be clear (an ``error``
status whose message names the ACP agent, never an internal error); a
script of harmless lines only must succeed with exactly its chunks as output;
and the agent's process must be gone after ``close()``.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import orjson
import psutil
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from oma_bridge.agent import Agent, AgentConfig
from oma_bridge.backends.acp import AcpConfig
from oma_bridge.results import AgentRunResult

SESSION = "fz-1"
LIMIT = 32 * 1024 * 1024  # the default max_line_bytes
RUN_BOUND_S = 30.0

#: The agent: ``python -I -S -c AGENT <script.json>``.
AGENT = r"""
import json, os, re, sys

script = json.load(open(sys.argv[1]))
out = sys.stdout.buffer
closed = False

def send(message):
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()

def lines(ident):
    def sub(match):
        offset = match.group(1)
        if offset and isinstance(ident, int):
            return json.dumps(ident + int(offset)).encode()
        return json.dumps(ident).encode()
    for kind, value in script["lines"]:
        if kind == "huge":
            text = "x" * (value - 120)
            update = {"sessionUpdate": "agent_message_chunk",
                      "content": {"type": "text", "text": text}}
            data = json.dumps({"jsonrpc": "2.0", "method": "session/update",
                               "params": {"sessionId": "fz-1", "update": update}}).encode()
            data += b" " * (value - len(data))
        else:
            data = re.sub(rb'"__ID([+-][0-9]+)?__"', sub, bytes.fromhex(value))
        out.write(data + b"\n")
    out.flush()

for line in sys.stdin.buffer:
    try:
        message = json.loads(line)
    except ValueError:
        continue
    if not isinstance(message, dict) or closed:
        continue
    method, ident = message.get("method"), message.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": ident,
              "result": {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": ident, "result": {"sessionId": "fz-1"}})
    elif method == "session/prompt":
        lines(ident)
        end = script["end"]
        if end == "answer":
            send({"jsonrpc": "2.0", "id": ident, "result": {"stopReason": "end_turn"}})
        elif end == "error":
            send({"jsonrpc": "2.0", "id": ident,
                  "error": {"code": -32603, "message": "scripted failure"}})
        elif end == "exit":
            os._exit(script["code"])
        elif end == "eof":
            os.close(1)
            closed = True
    elif method is not None and ident is not None:
        send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "no"}})
"""


@dataclass(frozen=True)
class Script:
    """What the agent replays during the prompt, and how the turn ends."""

    lines: list[tuple[str, Any]]  # ("raw", hex of one line) or ("huge", its size in bytes)
    end: str  # "answer", "error", "exit", "eof"
    code: int = 1
    #: Only harmless lines: the run must succeed with exactly these chunks as output.
    expected_output: str | None = None

    def may_answer(self) -> bool:
        """Whether a line carries the prompt's own id (so it may end the turn early)."""
        return any(kind == "raw" and b'"__ID__"' in bytes.fromhex(v) for kind, v in self.lines)

    def to_json(self) -> bytes:
        return orjson.dumps({"lines": self.lines, "end": self.end, "code": self.code})


def raw(data: bytes) -> tuple[str, str]:
    return ("raw", data.replace(b"\n", b" ").hex())


def message(body: dict[str, Any]) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", **body})


def chunk(text: str) -> dict[str, Any]:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    return {"method": "session/update", "params": {"sessionId": SESSION, "update": update}}


int64s = st.integers(-(2**63), 2**63 - 1)  # what orjson encodes
json_values = st.recursive(
    st.none() | st.booleans() | int64s | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
texts = st.text(max_size=60).filter(lambda t: "\n" not in t and "\r" not in t)
#: Ids of responses: the prompt's own (a placeholder the agent fills in), a stale
#: or a future one (relative to it), and ids the client never used.
ids = st.one_of(
    st.just("__ID__"),
    st.integers(-3, 3).filter(bool).map(lambda k: f"__ID{k:+d}__"),
    st.integers(10**6, 10**7),
    st.text(max_size=10),
    st.none(),
    st.floats(allow_nan=False),
    st.lists(int64s, max_size=2),
)
unknown_kinds = st.text(min_size=1, max_size=20).filter(
    lambda k: k not in ("agent_message_chunk", "agent_thought_chunk", "plan", "tool_call")
)

random_text_lines = texts.map(lambda t: raw(t.encode()))
random_byte_lines = st.binary(max_size=80).map(raw)
truncated_lines = st.builds(
    lambda body, cut: raw(message(body)[: max(1, int(len(message(body)) * cut))]),
    st.one_of(st.builds(chunk, texts), st.builds(lambda i: {"id": i, "result": {}}, ids)),
    st.floats(0.05, 0.95),
)
deep_lines = st.builds(
    lambda depth, where: raw(
        b"[" * depth + b"]" * depth
        if where == "bare"
        else message(chunk("deep"))[:-2] + b',"deep":' + b"[" * depth + b"]" * depth + b"}}"
    ),
    st.sampled_from([64, 600, 1100, 5000, 200_000]),
    st.sampled_from(["bare", "inside"]),
)
responses = st.builds(
    lambda i, outcome: raw(
        message({"id": i, **outcome}).replace(b'"__ID', b'"__ID')  # placeholders stay quoted
    ),
    ids,
    st.one_of(
        st.builds(lambda r: {"result": r}, json_values),
        st.just({"result": {"stopReason": "end_turn"}}),
        st.builds(lambda r: {"result": {"stopReason": r}}, st.text(max_size=12)),
        st.builds(lambda c, m: {"error": {"code": c, "message": m}}, st.integers(-33000, 0), texts),
        st.builds(lambda e: {"error": e}, json_values),
    ),
)
updates = st.one_of(
    st.builds(chunk, texts),
    st.builds(
        lambda kind, extra: {
            "method": "session/update",
            "params": {"sessionId": SESSION, "update": {"sessionUpdate": kind, **extra}},
        },
        unknown_kinds,
        st.dictionaries(st.text(max_size=8), json_values, max_size=3),
    ),
    st.builds(lambda p: {"method": "session/update", "params": p}, json_values),
    st.builds(
        lambda sid, t: {**chunk(t), "params": {**chunk(t)["params"], "sessionId": sid}},
        st.text(max_size=8),
        texts,
    ),
).map(lambda body: raw(message(body)))
requests = st.builds(
    lambda method, i, params: raw(message({"id": i, "method": method, "params": params})),
    st.sampled_from(
        [
            "session/request_permission",
            "fs/read_text_file",
            "fs/write_text_file",
            "terminal/create",
            "no/such/method",
        ]
    ),
    st.integers(0, 10**6) | st.text(max_size=8),
    json_values,
)
any_line = st.one_of(
    random_text_lines,
    random_byte_lines,
    truncated_lines,
    deep_lines,
    responses,
    updates,
    requests,
)
scripts = st.builds(
    Script,
    lines=st.lists(any_line, max_size=25),
    end=st.sampled_from(["answer", "error", "exit", "eof"]),
    code=st.integers(0, 255),
)


def _harmless(pieces: list[tuple[str, str]]) -> Script:
    lines: list[tuple[str, Any]] = []
    output = []
    for kind, value in pieces:
        if kind == "chunk":
            lines.append(raw(message(chunk(value))))
            output.append(value)
        elif kind == "unknown":
            body = {"sessionUpdate": value, "note": "from a newer agent"}
            update = {"method": "session/update", "params": {"sessionId": SESSION, "update": body}}
            lines.append(raw(message(update)))
        else:  # a stray answer to a request the client never sent
            lines.append(raw(message({"id": f"stray-{value}", "result": {}})))
    return Script(lines, "answer", expected_output="".join(output))


harmless_scripts = st.lists(
    st.tuples(st.sampled_from(["chunk", "unknown", "stray"]), texts), max_size=20
).map(lambda pieces: _harmless([(k, v or "t") if k == "unknown" else (k, v) for k, v in pieces]))


def agent_processes(marker: str) -> list[psutil.Process]:
    """Our descendants whose command line holds ``marker`` (the script's path)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if marker in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
    return found


async def play(script: Script) -> tuple[AgentRunResult, list[psutil.Process]]:
    """Run one prompt against the scripted agent; the result and the agent processes seen."""
    with tempfile.TemporaryDirectory(prefix="omab-acpfz-") as name:
        path = Path(name) / "script.json"
        await anyio.Path(path).write_bytes(script.to_json())
        config = AcpConfig(
            command=sys.executable,
            args=("-I", "-S", "-c", AGENT, str(path)),
            fs="none",
            permission="reject",
            cancel_grace_s=1.0,
            stop_grace_s=1.0,
        )
        agent = Agent(AgentConfig(name="fuzz", backend=config))
        seen: list[psutil.Process] = []
        try:
            with anyio.fail_after(RUN_BOUND_S):
                result = await agent.run("go")
            seen = agent_processes(str(path))
        finally:
            with anyio.CancelScope(shield=True), anyio.fail_after(15):
                await agent.close()
        with anyio.fail_after(5):
            while agent_processes(str(path)):  # noqa: ASYNC110 (a poll of other processes)
                await anyio.sleep(0.02)
        return result, seen


def check(result: AgentRunResult, script: Script) -> None:
    if script.expected_output is not None:
        assert result.success, result.status
        assert result.output == script.expected_output
        return
    if script.end in ("exit", "eof") and not script.may_answer():
        assert not result.success
    if result.success:
        assert result.status.code == "ok"
        return
    message = result.status.message or ""
    assert result.status.code == "error", result.status
    assert result.error_info is not None and result.error_info.kind != "internal", result
    assert message.startswith("ACP agent"), message
    assert "Traceback" not in message


def _run_examples(portal: BlockingPortal) -> None:
    @settings(
        max_examples=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(script=st.one_of(scripts, scripts, harmless_scripts))
    @example(script=Script([("huge", LIMIT - 64)], "answer"))  # just under the limit
    @example(script=Script([("huge", LIMIT + 64)], "answer"))  # just over it
    @example(script=Script([raw(b"not json")] * 200, "answer"))  # a flood of noise
    def run_one(script: Script) -> None:
        result, _ = portal.call(play, script)
        check(result, script)

    run_one()


def test_fuzzed_acp_output_ends_every_run_clearly() -> None:
    with start_blocking_portal("asyncio") as portal:
        _run_examples(portal)


def test_a_line_just_over_the_ceiling_fails_the_run() -> None:
    result, _ = anyio.run(play, Script([("huge", LIMIT + 64)], "answer"))
    assert not result.success
    assert "wrote a line longer than 33554432 bytes" in (result.status.message or "")
