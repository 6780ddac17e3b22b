"""Errors an ACP client can show (PROTOCOL §18.3): ``data.details`` on every error, the
shim's refusals with the codes of §7 that say what happened, -32601 for an unknown method.

Toad and the TypeScript SDK show an error's ``data.details``, never its
``message``; CodeCompanion.nvim shows every error but -32603.  The client here
is the official Python SDK's (``sdk_client.py``) where an SDK can send the
request, a raw websocket where none would (an unknown method).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .harness import Facade, run_sdk_client

INITIALIZE = [{"op": "initialize"}]


def test_no_daemon_with_no_autostart_is_not_an_internal_error(
    facade: Facade, no_daemon: dict[str, str]
) -> None:
    script = {"command": facade.shim("echo", "--no-autostart"), "steps": INITIALIZE}
    run = run_sdk_client(script, no_daemon)
    error = run.error("initialize")
    assert error["code"] == -32000  # a daemon that cannot be reached, not -32603
    assert error["message"].startswith("oma-bridge: no daemon is running (no ")
    assert no_daemon["XDG_RUNTIME_DIR"] in error["message"]  # where it looked
    assert error["data"] == {"name": "Unreachable", "details": error["message"]}


def test_an_unknown_profile_is_not_found(facade: Facade) -> None:
    run = run_sdk_client({"command": facade.shim("ecoh"), "steps": INITIALIZE}, facade.env)
    error = run.error("initialize")
    assert error["code"] == -32011
    assert error["message"] == 'oma-bridge: the daemon has no agent profile named "ecoh"'
    assert error["data"] == {"name": "NotFound", "details": error["message"]}


def test_the_facade_s_refusals_carry_details(facade: Facade, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    steps = [{"op": "initialize"}, {"op": "new", "cwd": str(outside)}]
    run = run_sdk_client({"command": facade.shim("demo"), "steps": steps}, facade.env)
    error = run.error("new")
    assert error["code"] == -32012
    assert error["data"] == {"name": "Forbidden", "details": error["message"]}
    # PROTOCOL §18.3: the roots, the key, the config file to put the folder in.
    root, real = os.path.realpath(facade.work), os.path.realpath(outside)
    assert error["message"] == (
        f"Forbidden: cwd {outside} is outside the workspace roots ({root}); to allow it, add "
        f"it to [server] workspace_roots in {facade.root / 'bridge.toml'}: "
        f'workspace_roots = ["{root}", "{real}"], then restart the daemon'
    )


@pytest.mark.anyio
async def test_an_unknown_method_is_method_not_found(facade: Facade) -> None:
    client = await facade.raw("echo")
    try:
        await client.initialize()
        for params in (None, [], {"sessionId": "x"}):
            answer = await client.call("session/teleport", params)
            assert answer["error"] == {
                "code": -32601,
                "message": "Method not found: session/teleport",
                "data": {"details": "Method not found: session/teleport"},
            }, params
        # A known method with params of the wrong shape is still -32602, with its details.
        wrong = await client.call("session/new", ["not", "an", "object"])
        assert wrong["error"]["code"] == -32602
        assert wrong["error"]["data"] == {"details": "params must be an object"}
    finally:
        await client.close()
