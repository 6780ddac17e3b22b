"""Trace context in and out of the daemon (PROTOCOL §20.2), seen at a real OTLP/HTTP receiver
and by the real peers: the ACP facade's client, the official TypeScript SDK agent downstream,
a process agent's command, an ``oma/runTasks`` DAG, an ACP agent's tool call."""

from __future__ import annotations

import secrets
from pathlib import Path

import anyio
import orjson
import pytest
from acp_facade.harness import RawClient
from daemon.conftest import daemon
from support.npm_peers import require_node
from support.otlp import OtlpReceiver, ReceivedSpan
from websockets.asyncio.client import unix_connect

from oma_bridge.client import connect

pytestmark = pytest.mark.anyio

TS_AGENT = Path(__file__).resolve().parent.parent / "agents" / "acp_ts_agent.mjs"


def caller_context() -> tuple[str, str, str]:
    """A caller's W3C ``traceparent`` (sampled), its trace id and its span id."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def ts_profile(sdk: Path, name: str = "ts") -> str:
    return f"""
[agents.{name}]
kind = "acp"
command = "{require_node()}"
args = ["{TS_AGENT}"]
env = {{ OMA_ACP_TS_SDK_DIR = "{sdk}" }}
permission = "auto-approve"
"""


def one(receiver: OtlpReceiver, name: str) -> ReceivedSpan:
    spans = receiver.named(name)
    assert len(spans) == 1, [span.name for span in receiver.spans]
    return spans[0]


def chunks(client: RawClient) -> str:
    return "".join(
        message["params"]["update"]["content"]["text"]
        for message in client.seen
        if message.get("method") == "session/update"
        and message["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    )


async def test_a_facade_prompt_with_a_traceparent_reaches_the_downstream_agent(
    otlp: OtlpReceiver, short_dir: Path, acp_ts_sdk: Path
) -> None:
    traceparent, trace_id, caller_span = caller_context()
    server = f'workspace_roots = ["{short_dir}"]'
    async with daemon(short_dir, server=server, agents=ts_profile(acp_ts_sdk)):
        ws = await unix_connect(str(short_dir / "bridge.sock"), "ws://localhost/acp/ts")
        async with ws:
            client = RawClient(ws)
            with anyio.fail_after(30):
                await client.initialize()
                new = await client.call("session/new", {"cwd": str(short_dir), "mcpServers": []})
                session_id = new["result"]["sessionId"]
                answer = await client.call(
                    "session/prompt",
                    {
                        "sessionId": session_id,
                        "prompt": [{"type": "text", "text": "meta"}],
                        "_meta": {"traceparent": traceparent, "baggage": "team=core", "x": 1},
                    },
                )
    assert answer["result"] == {"stopReason": "end_turn"}
    otlp.wait_for(lambda r: bool(r.named("invoke_agent ts")))
    run = one(otlp, "invoke_agent ts")
    assert (run.trace_id, run.parent_id) == (trace_id, caller_span)
    assert run.attributes["gen_ai.conversation.id"] == session_id
    assert run.attributes["oma_bridge.agent.kind"] == "acp"
    # What the TypeScript SDK agent received in session/prompt's _meta: the run's span as
    # the parent, the caller's trace; the caller's other keys as sent.
    seen = orjson.loads(chunks(client).removeprefix("meta:"))
    assert seen["traceparent"] == f"00-{trace_id}-{run.span_id}-01"
    assert seen["baggage"] == "team=core" and seen["x"] == 1


async def test_a_process_run_gets_traceparent_in_its_environment(
    otlp: OtlpReceiver, short_dir: Path
) -> None:
    agents = """
[agents.tp]
kind = "process"
command = "sh"
args = ["-c", "echo $TRACEPARENT; echo $OTEL_EXPORTER_OTLP_ENDPOINT"]

[agents.own]
kind = "process"
command = "sh"
args = ["-c", "echo $TRACEPARENT"]
env = { TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" }
"""
    traceparent, trace_id, caller_span = caller_context()
    async with daemon(short_dir, agents=agents), connect(discovery_dir=short_dir) as client:
        with anyio.fail_after(30):
            opened = await client.request("agent/open", {"profile": "tp"})
            result = await client.request(
                "agent/run",
                {
                    "agentId": opened["agentId"],
                    "input": "go",
                    "_meta": {"traceparent": traceparent},
                },
            )
            own = await client.request("agent/open", {"profile": "own"})
            profile_wins = await client.request(
                "agent/run",
                {"agentId": own["agentId"], "input": "go", "_meta": {"traceparent": traceparent}},
            )
    otlp.wait_for(lambda r: len(r.named("invoke_agent")) == 2)
    run = one(otlp, "invoke_agent tp")
    assert (run.trace_id, run.parent_id) == (trace_id, caller_span)
    printed, endpoint = result["output"].splitlines()
    assert printed == f"00-{trace_id}-{run.span_id}-01"
    assert endpoint == otlp.endpoint  # passed on, so that a traced tool sends there too
    # A variable the profile sets is never overridden.
    assert profile_wins["output"].strip() == (
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    )


async def test_run_tasks_has_one_workflow_span_above_its_tasks(
    otlp: OtlpReceiver, short_dir: Path
) -> None:
    agents = """
[agents.cat]
kind = "process"
command = "cat"

[agents.upper]
kind = "process"
command = "tr"
args = ["a-z", "A-Z"]
"""
    traceparent, trace_id, caller_span = caller_context()
    tasks = [
        {"id": "draft", "title": "Draft", "description": "write it", "assignee": "cat"},
        {"id": "shout", "title": "Shout", "description": "shout it", "assignee": "upper"},
        {
            "id": "check",
            "title": "Check",
            "description": "check it",
            "assignee": "cat",
            "dependsOn": ["draft", "shout"],
        },
    ]
    async with daemon(short_dir, agents=agents), connect(discovery_dir=short_dir) as client:
        with anyio.fail_after(30):
            result = await client.request(
                "oma/runTasks",
                {"tasks": tasks, "runId": "dag-1", "_meta": {"traceparent": traceparent}},
            )
    assert result["success"], result
    otlp.wait_for(lambda r: bool(r.named("invoke_workflow")) and len(r.named("invoke_agent")) == 3)
    workflow = one(otlp, "invoke_workflow runTasks")
    assert (workflow.trace_id, workflow.parent_id) == (trace_id, caller_span)
    assert workflow.attributes == {
        "gen_ai.operation.name": "invoke_workflow",
        "gen_ai.workflow.name": "runTasks",
        "oma_bridge.run.id": "dag-1",
        "oma_bridge.run.status": "ok",
    }
    runs = otlp.named("invoke_agent")
    assert sorted(span.name for span in runs) == [
        "invoke_agent cat",
        "invoke_agent cat",
        "invoke_agent upper",
    ]
    assert {(span.trace_id, span.parent_id) for span in runs} == {(trace_id, workflow.span_id)}
    check = max(runs, key=lambda span: span.start_ns)
    assert check.start_ns >= max(span.end_ns for span in runs if span is not check)
    assert workflow.start_ns <= min(span.start_ns for span in runs)
    assert workflow.end_ns >= max(span.end_ns for span in runs)


async def test_an_acp_agents_tool_call_is_an_execute_tool_span(
    otlp: OtlpReceiver, short_dir: Path, acp_ts_sdk: Path
) -> None:
    async with (
        daemon(short_dir, agents=ts_profile(acp_ts_sdk)),
        connect(discovery_dir=short_dir) as client,
    ):
        agent = await client.open("ts")
        with anyio.fail_after(30):
            result = await agent.prompt("toolcall")
    assert result.success, result.output
    otlp.wait_for(lambda r: len(r.named("execute_tool")) == 2 and bool(r.named("invoke_agent")))
    run = one(otlp, "invoke_agent ts")
    read = one(otlp, "execute_tool Read notes")
    failed = one(otlp, "execute_tool Run tests")
    assert {(span.trace_id, span.parent_id) for span in (read, failed)} == {
        (run.trace_id, run.span_id)
    }
    assert read.attributes == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "Read notes",
        "gen_ai.tool.call.id": "tc-read",
        "oma_bridge.tool.kind": "read",
    }
    assert read.status == "UNSET"
    assert failed.status == "ERROR" and failed.attributes["error.type"] == "tool_error"
    assert read.end_ns <= failed.start_ns
    assert "secret notes" not in repr([span.attributes for span in otlp.spans])


async def test_agent_prompts_meta_reaches_the_acp_agent_with_the_run_as_parent(
    otlp: OtlpReceiver, short_dir: Path, acp_ts_sdk: Path
) -> None:
    traceparent, trace_id, caller_span = caller_context()
    meta = {"traceparent": traceparent, "tracestate": "vendor=1", "k": "v", "oma-bridge/x": 1}
    async with (
        daemon(short_dir, agents=ts_profile(acp_ts_sdk)),
        connect(discovery_dir=short_dir) as client,
    ):
        opened = await client.request("agent/open", {"profile": "ts"})
        with anyio.fail_after(30):
            result = await client.request(
                "agent/prompt", {"agentId": opened["agentId"], "input": "meta", "_meta": meta}
            )
    otlp.wait_for(lambda r: bool(r.named("invoke_agent ts")))
    run = one(otlp, "invoke_agent ts")
    assert (run.trace_id, run.parent_id) == (trace_id, caller_span)
    seen = orjson.loads(result["output"].removeprefix("meta:"))
    # The run's span as the parent, the caller's tracestate and other keys; never the
    # daemon's reserved ones (D22).
    assert seen == {
        "traceparent": f"00-{trace_id}-{run.span_id}-01",
        "tracestate": "vendor=1",
        "k": "v",
    }
