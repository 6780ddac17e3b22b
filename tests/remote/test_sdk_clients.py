"""A remote profile driven through A's facade by the official SDK clients (PROTOCOL §21).

The Python SDK's client (``sdk_client.py``) and the TypeScript SDK's
(``acp_ts_client.mjs``) start A's shim (``oma-bridge acp remote``) as an editor
would; A's profile ``remote`` is B's ``demo`` over ``wss://`` with B's token.
Nothing is mocked: two daemons, a TLS hop, B's demo agent.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from acp_facade.harness import Facade, run_sdk_client
from support.ts_client import run_ts_client

from oma_bridge.demo.acp_agent import reply_chunks

from .harness import Pair

PNG = {"data": "aGVsbG8=", "mimeType": "image/png"}


def script(facade: Facade, profile: str, *steps: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "command": facade.shim(profile),
        "cwd": str(facade.work),
        "steps": [{"op": "initialize"}, *steps],
        **extra,
    }


def _decisions(facade: Facade) -> list[dict[str, Any]]:
    return [r for r in facade.audit() if r["event"] == "permission"]


def test_python_sdk_turns_permission_cancel_and_load_after_a_restart(pair: Pair) -> None:
    a = pair.a
    # The text-only boundary holds before anything is opened: B never hears of it.
    refused = run_sdk_client(
        script(a, "remote", {"op": "new"}, {"op": "prompt", "text": "look", "images": [PNG]}),
        a.env,
    )
    error = refused.error("prompt")
    assert error["code"] == -32602
    assert error["message"] == 'prompt[1] is an image block; profile "remote" carries text only'
    assert pair.proxy.accepted == 0

    run = run_sdk_client(
        script(
            a,
            "remote",
            {"op": "new"},
            {"op": "prompt", "text": "hello over the network"},
            {"op": "prompt", "text": "/tool one two three"},
            {"op": "prompt", "text": "/wait 30", "cancelAfter": 1},
            permission="allow",
        ),
        a.env,
    )
    session_id = run.result("new")["sessionId"]
    plain, tool, cancelled = (r["result"] for r in run.responses("prompt"))
    assert (plain, tool, cancelled) == (
        {"stopReason": "end_turn"},
        {"stopReason": "end_turn"},
        {"stopReason": "cancelled"},
    )
    chunks = run.chunks()
    assert chunks[:3] == reply_chunks("hello over the network", 1, "demo-1", 4)
    assert "The tool counted 3 words." in chunks
    assert chunks[-2:] == ["Waiting 30 s (cancel me)...", " cancelled."]
    [asked] = run.of("permission")
    assert asked["optionId"] == "allow-once"  # answered by A's client, the SDK's
    assert [u["status"] for u in run.updates("tool_call_update")][-1] == "completed"
    # A audits who answered (the SDK client); B audits that its client (A) did.
    [mine] = _decisions(a)
    assert mine["agentId"] == session_id
    assert mine["outcome"] == {"outcome": "selected", "optionId": "allow-once"}
    assert mine["decidedBy"]["client"]["name"] != "oma-bridge"
    [theirs] = _decisions(pair.b)
    assert theirs["outcome"] == mine["outcome"]
    assert theirs["decidedBy"]["client"]["name"] == "oma-bridge"

    # A restarts: session/load replays A's own journal, and the next turn continues
    # B's session (the same demo agent: turn 4).
    a.restart()
    loaded = run_sdk_client(
        script(
            a,
            "remote",
            {"op": "load", "sessionId": session_id},
            {"op": "prompt", "text": "after the restart"},
        ),
        a.env,
    )
    assert loaded.result("load") == {}
    said = loaded.chunks()
    replayed = reply_chunks("hello over the network", 1, "demo-1", 4)
    assert said[:3] == replayed
    assert said[-1].startswith("This is turn 4 of session demo-1 "), said[-3:]


@pytest.mark.anyio
async def test_typescript_sdk_client_over_the_remote_profile(acp_ts_sdk: Path, pair: Pair) -> None:
    a = pair.a
    started = time.monotonic()
    run = await run_ts_client(
        {
            "agent": a.shim("remote"),
            "env": a.env,
            "cwd": str(a.work),
            "steps": [
                {"op": "initialize"},
                {"op": "new"},
                {"op": "prompt", "text": "from typescript"},
            ],
        },
        timeout_s=30,
    )
    assert run.ok, run.describe()
    assert run.chunks() == reply_chunks("from typescript", 1, "demo-1", 2)
    assert run.result("session/prompt") == {"stopReason": "end_turn"}
    assert time.monotonic() - started < 30
