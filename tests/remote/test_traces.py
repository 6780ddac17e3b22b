"""One trace across two daemons (PROTOCOL §20.2 with §21): A's run of a remote profile sends
its span's ``traceparent`` in the ``session/prompt`` to B, whose facade run is its child; both
daemons export to the same real OTLP/HTTP receiver (tests/support/otlp.py)."""

from __future__ import annotations

import secrets

import anyio
import pytest
from support.otlp import OtlpReceiver
from telemetry.conftest import otlp

from oma_bridge.client import connect

from .harness import Pair

pytestmark = pytest.mark.anyio

__all__ = ["otlp"]


async def test_a_remote_agents_run_is_a_child_of_the_callers_run(
    otlp: OtlpReceiver, pair: Pair
) -> None:
    trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    meta = {"traceparent": f"00-{trace_id}-{caller_span}-01"}
    async with connect(socket=pair.a.discovery()["socket"]) as client:
        opened = await client.request("agent/open", {"profile": "remote"})
        with anyio.fail_after(30):
            result = await client.request(
                "agent/prompt", {"agentId": opened["agentId"], "input": "hello", "_meta": meta}
            )
    assert result["status"]["code"] == "ok", result
    otlp.wait_for(lambda r: bool(r.named("invoke_agent remote") and r.named("invoke_agent demo")))
    (a_run,) = otlp.named("invoke_agent remote")
    (b_run,) = otlp.named("invoke_agent demo")
    assert (a_run.trace_id, a_run.parent_id) == (trace_id, caller_span)
    assert (b_run.trace_id, b_run.parent_id) == (trace_id, a_run.span_id)
    assert a_run.attributes["oma_bridge.agent.kind"] == "acp"
