"""The library's spans (``Agent``, ``OpenMultiAgent``) at a real OTLP/HTTP receiver: an llm
agent against the suite's fake provider server, with an in-process tool; ``on_trace`` and the
exported spans are one trace; ``otel_content`` puts the text on, and only then."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import orjson
import pytest
from fake_llm_provider import FakeProvider, ToolCall, Turn, error_reply
from support.otlp import OtlpReceiver

from oma_bridge import telemetry
from oma_bridge.agent import AgentConfig
from oma_bridge.backends.process import ProcessConfig
from oma_bridge.orchestration.orchestrator import OpenMultiAgent
from oma_bridge.orchestration.roster import Team
from oma_bridge.tools import ToolDefinition

pytestmark = pytest.mark.anyio


@pytest.fixture
async def anthropic_server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeProvider]:
    monkeypatch.setenv("OMA_TEST_KEY", "sk-test-otel-library-0123456789")
    server = FakeProvider("anthropic")
    async with server.running():
        yield server
    assert server.violations == [], server.violations


def config(server: FakeProvider) -> AgentConfig:
    async def lookup(args: dict[str, Any]) -> str:
        await anyio.sleep(0.01)
        return f"found {args['q']}"

    return AgentConfig(
        name="researcher",
        provider="anthropic",
        model="claude-test",
        base_url=server.base_url,
        api_key_env="OMA_TEST_KEY",
        tools=(ToolDefinition(name="lookup", execute=lookup),),
    )


def script(server: FakeProvider) -> None:
    server.turn(
        Turn(tool_calls=[ToolCall("toolu_1", "lookup", {"q": "otters"})], usage=(20, 7)),
        Turn(text=["Otters hold hands."], usage=(40, 5)),
    )


async def test_run_agent_spans_and_on_trace_are_one_trace(
    otlp: OtlpReceiver, anthropic_server: FakeProvider
) -> None:
    script(anthropic_server)
    records: list[dict[str, Any]] = []
    oma = OpenMultiAgent(on_trace=records.append)
    result = await oma.run_agent(config(anthropic_server), "Tell me of otters", run_id="lib-1")
    assert result.success, result.output
    otlp.wait_for(lambda r: len(r.named("chat")) == 2 and bool(r.named("invoke_agent")))
    (run,) = otlp.named("invoke_agent researcher")
    first, second = sorted(otlp.named("chat claude-test"), key=lambda span: span.start_ns)
    (tool,) = otlp.named("execute_tool lookup")
    assert {first.parent_id, second.parent_id, tool.parent_id} == {run.span_id}
    assert {first.trace_id, second.trace_id, tool.trace_id} == {run.trace_id}
    assert (
        first.attributes["gen_ai.usage.input_tokens"],
        first.attributes["gen_ai.usage.output_tokens"],
    ) == (20, 7)
    assert second.attributes["gen_ai.usage.input_tokens"] == 40
    assert run.attributes["gen_ai.usage.input_tokens"] == 60  # the run's total
    assert run.attributes["gen_ai.usage.output_tokens"] == 12
    assert tool.attributes == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.id": "toolu_1",
    }
    assert first.end_ns <= tool.end_ns <= second.start_ns
    # on_trace's records name the same trace and root span as the exported spans.
    root = next(record for record in records if record["type"] == "agent")
    assert (root["traceId"], root["spanId"]) == (run.trace_id, run.span_id)
    assert result.identity is not None and result.identity.trace_id == run.trace_id
    assert {record["traceId"] for record in records} == {run.trace_id}
    assert "otters" not in repr([span.attributes for span in otlp.spans])


async def test_content_is_recorded_only_when_asked(
    otlp: OtlpReceiver, anthropic_server: FakeProvider
) -> None:
    script(anthropic_server)
    telemetry.configure(content=True)
    result = await OpenMultiAgent().run_agent(config(anthropic_server), "Tell me of otters")
    assert result.success
    otlp.wait_for(lambda r: bool(r.named("invoke_agent")))
    (run,) = otlp.named("invoke_agent researcher")
    (tool,) = otlp.named("execute_tool lookup")
    assert "Tell me of otters" in run.attributes["gen_ai.input.messages"]
    assert "Otters hold hands." in run.attributes["gen_ai.output.messages"]
    assert tool.attributes["gen_ai.tool.call.arguments"] == '{"q":"otters"}'
    assert "found otters" in tool.attributes["gen_ai.tool.call.result"]


async def test_a_failed_run_is_an_error_span_with_its_code(
    otlp: OtlpReceiver, anthropic_server: FakeProvider
) -> None:
    anthropic_server.reply(error_reply(401, "invalid x-api-key"))
    result = await OpenMultiAgent().run_agent(config(anthropic_server), "hello")
    assert not result.success and result.error_info is not None
    otlp.wait_for(lambda r: bool(r.named("invoke_agent")))
    (run,) = otlp.named("invoke_agent researcher")
    (chat,) = otlp.named("chat claude-test")
    assert run.status == "ERROR" and chat.status == "ERROR"
    assert run.attributes["error.type"] == result.error_info.code
    assert run.status_message == result.error_info.code
    assert run.attributes["oma_bridge.run.status"] == "error"


#: An application that set up its own SDK provider: our spans go to it, not to an exporter of
#: our own (no OTEL variable is set; ``opentelemetry=True`` turns tracing on).
OWN_PROVIDER = """
import anyio, orjson
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from oma_bridge.agent import AgentConfig
from oma_bridge.backends.process import ProcessConfig
from oma_bridge.orchestration.orchestrator import OpenMultiAgent
from oma_bridge.orchestration.roster import Team

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
config = AgentConfig(name="echoer", provider="echo", model="echo-1")
with trace.get_tracer("app").start_as_current_span("app request") as outer:
    anyio.run(OpenMultiAgent(opentelemetry=True).run_agent, config, "hi")
print(orjson.dumps([
    [s.name, s.parent.span_id if s.parent else None, s.context.span_id]
    for s in exporter.get_finished_spans()
]).decode())
"""


def test_an_applications_own_provider_gets_the_spans() -> None:
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", OWN_PROVIDER],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    spans = {name: (parent, own) for name, parent, own in orjson.loads(done.stdout)}
    assert set(spans) == {"app request", "invoke_agent echoer", "chat echo-1"}
    assert spans["invoke_agent echoer"][0] == spans["app request"][1]
    assert spans["chat echo-1"][0] == spans["invoke_agent echoer"][1]


async def test_run_team_is_one_workflow_above_the_coordinator_and_the_members(
    otlp: OtlpReceiver, anthropic_server: FakeProvider
) -> None:
    plan = [{"title": "Draft", "description": "Write it.", "assignee": "cat"}]
    anthropic_server.turn(
        Turn(text=[orjson.dumps(plan).decode()], usage=(30, 9)),
        Turn(text=["Drafted."], usage=(50, 2)),
    )
    coordinator = AgentConfig(
        name="lead",
        provider="anthropic",
        model="claude-test",
        base_url=anthropic_server.base_url,
        api_key_env="OMA_TEST_KEY",
    )
    cat = AgentConfig(name="cat", backend=ProcessConfig(command="cat"))
    result = await OpenMultiAgent().run_team(
        Team(agents={"cat": cat}, coordinator=coordinator), "Write a note.", run_id="team-1"
    )
    assert result.success, result.output
    otlp.wait_for(lambda r: bool(r.named("invoke_workflow")) and len(r.named("invoke_agent")) == 3)
    (workflow,) = otlp.named("invoke_workflow runTeam")
    runs = otlp.named("invoke_agent")
    assert sorted(span.name for span in runs) == [
        "invoke_agent cat",
        "invoke_agent lead",
        "invoke_agent lead",
    ]
    assert {(span.trace_id, span.parent_id) for span in runs} == {
        (workflow.trace_id, workflow.span_id)
    }
    assert workflow.parent_id is None
    assert workflow.attributes["oma_bridge.run.id"] == "team-1"
    assert workflow.attributes["oma_bridge.run.status"] == "ok"
    chats = otlp.named("chat claude-test")
    leads = {span.span_id for span in runs if span.name == "invoke_agent lead"}
    assert len(chats) == 2 and {span.parent_id for span in chats} == leads
