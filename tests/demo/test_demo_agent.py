"""The demo ACP agent: driven by the official SDK's client, by our ACP backend, and raw."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from oma_bridge.agent import Agent, AgentConfig
from oma_bridge.backends import PermissionRequest
from oma_bridge.backends.acp import AcpConfig

pytestmark = pytest.mark.anyio

DEMO = ("-m", "oma_bridge.demo.acp_agent")


SDK_CLIENT = Path(__file__).with_name("sdk_client.py")


async def test_the_official_sdk_client_drives_it(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        done = await anyio.run_process(
            [sys.executable, str(SDK_CLIENT), str(tmp_path), "hello demo world", "/tool one two"],
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    init, plain, tool = map(orjson.loads, done.stdout.splitlines())
    assert init == {"protocolVersion": 1, "name": "oma-bridge-demo"}
    assert plain["stopReason"] == "end_turn"
    assert plain["kinds"] == ["agent_message_chunk"] * 3 + ["usage_update"]
    assert plain["text"] == (
        "You said: hello demo world\n"
        "That is 3 words and 16 characters.\n"
        f"This is turn 1 of session {plain['sessionId']} (3 words so far)."
    )
    assert tool["stopReason"] == "end_turn"
    assert tool["asked"] == [["allow_once", "allow_always", "reject_once"]]
    assert tool["kinds"] == [
        "tool_call",
        "tool_call_update",
        "tool_call_update",
        "agent_message_chunk",
        "usage_update",
    ]
    assert tool["statuses"][:3] == ["pending", "in_progress", "completed"]
    assert tool["text"] == "The tool counted 2 words."


def _agent(tmp_path: Path, **fields: Any) -> Agent:
    config = AcpConfig(
        command=sys.executable,
        args=DEMO,
        cwd=tmp_path,
        permission=fields.pop("permission", "client"),
        stop_grace_s=2.0,
        cancel_grace_s=3.0,
    )
    return Agent(AgentConfig(name="demo", backend=config, **fields))


async def test_runs_share_one_session_and_stream_chunks(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    try:
        with anyio.fail_after(20):
            first = await agent.run("one two three")
            assert first.success and first.status.code == "ok"
            assert first.output.endswith("This is turn 1 of session demo-1 (3 words so far).")
            events = [event async for event in agent.stream("four")]
        texts = [event.data for event in events if event.type == "text"]
        assert len(texts) == 3  # one text event per agent_message_chunk
        done = events[-1].data
        assert events[-1].type == "done" and done.output == "".join(texts)
        assert done.output.startswith("You said: four\n")
        assert "turn 2 of session demo-1" in done.output
        assert done.token_usage.input_tokens > 0  # from usage_update
    finally:
        await agent.close()


def _choose(option_kind: str | None) -> Any:
    async def handler(request: PermissionRequest) -> str | None:
        for option in request.options:
            if option.kind == option_kind:
                return option.option_id
        return None

    return handler


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("allow_once", "The tool counted 3 words."),
        ("reject_once", "Permission refused: the tool did not run."),
    ],
)
async def test_tool_call_asks_for_permission(tmp_path: Path, kind: str, expected: str) -> None:
    agent = _agent(tmp_path)
    try:
        with anyio.fail_after(20):
            result = await agent.run(
                agent.prepare("/tool a b c"),
                run_id="r1",
                permission_handler=_choose(kind),
            )
        assert result.success and result.output == expected
        if kind == "allow_once":
            assert [(c.tool_name, c.input, c.output) for c in result.tool_calls] == [
                ("Count the words of a text", {"text": "a b c"}, '{"words":3}')
            ]
    finally:
        await agent.close()


async def test_always_allow_is_remembered_for_the_session(tmp_path: Path) -> None:
    asked: list[str] = []

    async def always(request: PermissionRequest) -> str | None:
        asked.append(request.run_id)
        return next(o.option_id for o in request.options if o.kind == "allow_always")

    agent = _agent(tmp_path)
    try:
        with anyio.fail_after(20):
            for run_id in ("r1", "r2"):
                result = await agent.run(
                    agent.prepare("/tool x"), run_id=run_id, permission_handler=always
                )
                assert result.output == "The tool counted 1 word."
        assert asked == ["r1"]
    finally:
        await agent.close()


async def test_cancel_ends_the_turn_cancelled_and_the_session_goes_on(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    try:
        with anyio.fail_after(20):
            stream = agent.stream("/wait 30", run_id="slow")
            async for event in stream:
                if event.type == "text":
                    assert agent.cancel("slow")
                if event.type == "done":
                    result = event.data
            assert result.status.code == "cancelled"
            assert result.output.startswith("Waiting 30 s")
            after = await agent.run("still here")
        assert after.success and "turn 2 of session demo-1" in after.output
    finally:
        await agent.close()


async def test_exits_on_stdin_eof_and_answers_unknown_methods(tmp_path: Path) -> None:
    process = await anyio.open_process([sys.executable, *DEMO], cwd=tmp_path)
    try:
        assert process.stdin is not None and process.stdout is not None
        requests = [
            {"jsonrpc": "2.0", "id": 1, "method": "session/load", "params": {}},
            {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "x"}},
        ]
        await process.stdin.send(b"".join(orjson.dumps(r) + b"\n" for r in requests))
        data = b""
        with anyio.fail_after(10):
            while data.count(b"\n") < 2:
                data += await process.stdout.receive()
        answers = {a["id"]: a["error"]["code"] for a in map(orjson.loads, data.splitlines())}
        assert answers == {1: -32601, 2: -32602}
        await process.stdin.aclose()
        with anyio.fail_after(10):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await process.aclose()
