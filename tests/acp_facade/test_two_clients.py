"""Two clients attached to one ACP session: one through the shim, one on ``/acp/<profile>``.

Both are the TypeScript SDK's client (``acp_ts_client.mjs``); a file barrier
orders their steps across the two processes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from support.ts_client import TsClientRun, run_ts_client

from .harness import Facade, facade_daemon, text

pytestmark = pytest.mark.anyio


async def new_session(facade: Facade, profile: str) -> str:
    """A session made by a third client that then goes away (its session stays)."""
    maker = await facade.raw(profile)
    await maker.initialize()
    session_id = await maker.new(facade.work)
    await maker.close()
    return session_id


def info(name: str) -> dict[str, Any]:
    return {"op": "initialize", "clientInfo": {"name": name, "version": "7.0"}}


async def both(first: dict[str, Any], second: dict[str, Any]) -> tuple[TsClientRun, TsClientRun]:
    runs: dict[str, TsClientRun] = {}

    async def one(name: str, script: dict[str, Any]) -> None:
        runs[name] = await run_ts_client(script, timeout_s=45)

    async with anyio.create_task_group() as group:
        group.start_soon(one, "first", first)
        group.start_soon(one, "second", second)
    return runs["first"], runs["second"]


async def test_both_see_every_update_and_the_first_answer_wins(
    acp_ts_sdk: Path, facade: Facade, tmp_path: Path
) -> None:
    facade.require("chunks")
    session_id = await new_session(facade, "chunks")
    ready, done = tmp_path / "ws-ready", tmp_path / "shim-done"
    shim_client = {
        "agent": facade.shim("chunks"),
        "env": facade.env,
        "cwd": str(facade.work),
        "permission": "hold",  # never answers: its copy must be withdrawn
        "steps": [
            info("shim-client"),
            {"op": "load", "sessionId": session_id},
            {"op": "awaitFile", "path": str(ready)},
            {"op": "prompt", "text": "ask"},
            {"op": "prompt", "text": "chunks 40"},
            {"op": "touch", "path": str(done)},
        ],
    }
    ws_client = {
        "url": f"{facade.ws_base}/acp/chunks",
        "token": facade.token,
        "cwd": str(facade.work),
        "permission": "allow",
        "steps": [
            info("ws-client"),
            {"op": "load", "sessionId": session_id},
            {"op": "touch", "path": str(ready)},
            {"op": "awaitFile", "path": str(done)},
            {"op": "sleep", "ms": 300},  # the last updates are in flight to this client too
        ],
    }
    shim_run, ws_run = await both(shim_client, ws_client)
    assert shim_run.ok, shim_run.describe()
    assert ws_run.ok, ws_run.describe()

    # The same updates, in the same order, on both doors.
    assert shim_run.updates() == ws_run.updates()
    assert shim_run.chunks() == ["permission: allow-once", *[f"{i}\n" for i in range(40)]]
    assert shim_run.updates()[0]["sessionUpdate"] == "tool_call"

    # The permission request reached both; the ws client answered; the shim's copy was
    # withdrawn with $/cancel_request naming its requestId.
    [asked] = [r for r in shim_run.of("request") if r["method"] == "session/request_permission"]
    [also_asked] = [r for r in ws_run.of("request") if r["method"] == "session/request_permission"]
    assert asked["params"] == also_asked["params"]
    assert asked["params"]["sessionId"] == session_id
    assert [p["outcome"] for p in ws_run.of("permission")] == [
        {"outcome": "selected", "optionId": "allow-once"}
    ]
    cancels = [n for n in shim_run.of("notification") if n["method"] == "$/cancel_request"]
    assert cancels == [
        {"type": "notification", "method": "$/cancel_request", "params": {"requestId": asked["id"]}}
    ]
    assert shim_run.of("withdrawn") == [
        {"type": "withdrawn", "method": "session/request_permission", "id": asked["id"]}
    ]
    assert not [n for n in ws_run.of("notification") if n["method"] == "$/cancel_request"]

    # The audit log names who decided.
    [decision] = [r for r in facade.audit() if r["event"] == "permission"]
    assert decision["agentId"] == session_id
    assert decision["outcome"] == {"outcome": "selected", "optionId": "allow-once"}
    assert decision["decidedBy"]["client"] == {"name": "ws-client", "version": "7.0"}


async def test_a_session_closed_by_one_client_answers_the_others_turn(facade: Facade) -> None:
    """session/close from B while A's turn runs: A's prompt is answered, both go on."""
    a = await facade.raw("demo")
    b = await facade.raw("demo")
    try:
        await a.initialize("a")
        await b.initialize("b")
        session_id = await a.new(facade.work)
        await a.send(
            {
                "jsonrpc": "2.0",
                "id": 99,
                "method": "session/prompt",
                "params": {"sessionId": session_id, "prompt": [text("/wait 30")]},
            }
        )
        while not a.updates():  # the turn is under way
            await a.receive()
        with anyio.fail_after(10):
            assert (await b.call("session/close", {"sessionId": session_id}))["result"] == {}
            while not any(m.get("id") == 99 for m in a.seen):
                await a.receive()
        [answer] = [m for m in a.seen if m.get("id") == 99]
        assert answer["result"] == {"stopReason": "cancelled"}
        with anyio.fail_after(10):  # both connections still serve
            for client in (a, b):
                other = await client.new(facade.work)
                reply = await client.prompt(other, text("still here"))
                assert reply["result"] == {"stopReason": "end_turn"}
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize(
    "retention", ["journal_max_events = 40", "journal_max_bytes = 4096"], ids=["events", "bytes"]
)
async def test_a_slow_reader_misses_no_update(tmp_path: Path, retention: str) -> None:
    """A turn far longer than the journal's retention, to a client that reads late."""
    with facade_daemon(tmp_path, server=retention) as facade:
        slow = await facade.raw("scenario")
        try:
            await slow.initialize()
            session_id = await slow.new(facade.work)
            await slow.send(
                {
                    "jsonrpc": "2.0",
                    "id": 7,
                    "method": "session/prompt",
                    "params": {"sessionId": session_id, "prompt": [text("chunks 3000")]},
                }
            )
            await anyio.sleep(1.5)  # reads nothing: the daemon must not run ahead of it
            with anyio.fail_after(60):
                while not any(m.get("id") == 7 for m in slow.seen):
                    await slow.receive()
            assert slow.seen[-1]["result"] == {"stopReason": "end_turn"}
            texts = [u["content"]["text"] for u in slow.updates()]
            assert texts == [f"{i}," for i in range(3000)]  # every one, in order, once
        finally:
            await slow.close()
