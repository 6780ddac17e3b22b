"""The official TypeScript SDK's client, on the shim's stdio and on ``ws://.../acp/<profile>``.

Skipped, with the reason, where node or the SDK cannot be had.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.ts_client import TsClientRun, run_ts_client

from .harness import Facade

pytestmark = pytest.mark.anyio

PNG = {"data": "aGVsbG8=", "mimeType": "image/png"}
STEPS: list[dict[str, Any]] = [
    {"op": "initialize"},
    {"op": "new"},
    {"op": "prompt", "text": "hello there"},
    {"op": "prompt", "text": "look", "images": [PNG]},
]


def check_echo(run: TsClientRun) -> None:
    assert run.ok, run.describe()
    capabilities = run.result("initialize")["agentCapabilities"]
    assert capabilities["promptCapabilities"]["image"] is True
    assert run.chunks() == ["hello ", "there", "look ", "[image:image/png]"]
    assert [r["result"] for r in run.responses("session/prompt")] == [
        {"stopReason": "end_turn"}
    ] * 2


def check_refusal(run: TsClientRun) -> None:
    assert run.returncode == 1, run.describe()  # the image step fails, as it should
    assert run.result("initialize")["agentCapabilities"]["promptCapabilities"]["image"] is False
    assert run.chunks()[:1] and "hello there" in "".join(run.chunks())
    text_turn, image_turn = run.responses("session/prompt")
    assert text_turn["result"] == {"stopReason": "end_turn"}
    error = image_turn["error"]
    assert error["code"] == -32602
    assert error["message"] == 'prompt[1] is an image block; profile "demo" carries text only'
    # details: what Toad and the TypeScript SDK show (PROTOCOL §18.3).
    assert error["data"] == {
        "name": "InvalidMessageError",
        "code": "INVALID_MESSAGE",
        "details": error["message"],
    }
    assert [line["index"] for line in run.of("step") if not line["ok"]] == [3]


async def test_ts_client_over_the_shim(acp_ts_sdk: Path, facade: Facade) -> None:
    for profile, check in (("echo", check_echo), ("demo", check_refusal)):
        script = {
            "agent": facade.shim(profile),
            "env": facade.env,
            "cwd": str(facade.work),
            "steps": STEPS,
        }
        run = await run_ts_client(script, timeout_s=30)
        check(run)
        assert not run.junk  # nothing but ACP reached the client through the shim's stdout


async def test_ts_client_over_websocket_with_a_bearer_token(
    acp_ts_sdk: Path, facade: Facade
) -> None:
    for profile, check in (("echo", check_echo), ("demo", check_refusal)):
        script = {
            "url": f"{facade.ws_base}/acp/{profile}",
            "token": facade.token,
            "protocols": ["acp.v1"],
            "cwd": str(facade.work),
            "steps": STEPS,
        }
        check(await run_ts_client(script, timeout_s=30))
