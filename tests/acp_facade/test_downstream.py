"""What the downstream agent of an acp profile does, as the facade's clients see it.

The agent is the scenario agent (``tests/agents/acp_scenario_agent.py``, the
official Python SDK's agent side, the behaviour picked by the prompt's first
word) run by a real daemon; the clients are the official Python SDK's client
through the shim and :class:`RawClient` on ``/acp/scenario``, which answers the
daemon's requests by hand.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from oma_bridge.client import connect

from .harness import Facade, run_sdk_client

pytestmark = pytest.mark.anyio


def sdk_script(facade: Facade, *steps: dict[str, Any]) -> dict[str, Any]:
    return {
        "command": facade.shim("scenario"),
        "cwd": str(facade.work),
        "steps": [{"op": "initialize"}, {"op": "new"}, *steps],
    }


def test_a_refusal_is_the_stop_reason_refusal(facade: Facade) -> None:
    run = run_sdk_client(
        sdk_script(facade, {"op": "prompt", "text": "refuse not doing that"}), facade.env
    )
    assert run.result("prompt") == {"stopReason": "refusal"}
    assert run.chunks() == ["not doing that"]


async def test_a_refusal_is_a_failed_run_on_the_daemons_own_protocol(facade: Facade) -> None:
    with anyio.fail_after(30):
        async with connect(discovery_dir=facade.runtime / "oma-bridge") as client:
            agent = await client.open("scenario")
            result = await agent.prompt("refuse not doing that")
    assert not result.success
    assert result.status.code == "error"
    assert result.status.message == 'ACP agent "scenario" refused the task: not doing that'
    assert result.error_info is not None
    assert (result.error_info.kind, result.error_info.code) == ("backend", "REFUSED")
