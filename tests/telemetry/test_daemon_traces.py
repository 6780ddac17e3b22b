"""The daemon's spans at a real OTLP/HTTP receiver (PROTOCOL §20.1, §20.2): the scenarios of
issue 27 against the suite's real peers (the fake provider server, processes, ACP agents)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from daemon.conftest import daemon
from fake_llm_provider import FakeProvider, Turn
from support.otlp import OtlpReceiver

from oma_bridge.client import connect

pytestmark = pytest.mark.anyio

KEY = "sk-test-otel-0123456789"
PROMPT = "a secret prompt text"


@pytest.fixture
async def openai_server() -> AsyncIterator[FakeProvider]:
    server = FakeProvider("openai")
    async with server.running():
        yield server
    assert server.violations == [], server.violations


def llm_profile(server: FakeProvider) -> str:
    return f"""
[agents.writer]
kind = "llm"
provider = "openai"
model = "gpt-test"
base_url = "{server.base_url}"
api_key_env = "OMA_TEST_KEY"
"""


def values(spans: list[Any]) -> str:
    return repr([span.attributes for span in spans])


async def test_agent_stream_of_an_llm_agent(
    otlp: OtlpReceiver,
    short_dir: Path,
    openai_server: FakeProvider,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMA_TEST_KEY", KEY)
    openai_server.turn(Turn(text=["Hello ", "world"], usage=(12, 3)))
    async with (
        daemon(short_dir, agents=llm_profile(openai_server)),
        connect(discovery_dir=short_dir) as client,
    ):
        agent = await client.open("writer")
        with anyio.fail_after(30):
            events = [event async for event in agent.stream(PROMPT, run_id="run-a")]
    assert events[-1].type == "done"
    otlp.wait_for(lambda r: bool(r.named("invoke_agent") and r.named("chat")))
    (run,) = otlp.named("invoke_agent writer")
    (chat,) = otlp.named("chat gpt-test")
    assert run.kind == "INTERNAL" and chat.kind == "CLIENT"
    assert chat.trace_id == run.trace_id and chat.parent_id == run.span_id
    assert run.parent_id is None  # no trace context came with the request
    assert run.service == "oma-bridge-test"
    assert run.attributes == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "writer",
        "gen_ai.agent.id": agent.agent_id,
        "gen_ai.conversation.id": agent.agent_id,
        "oma_bridge.run.id": "run-a",
        "oma_bridge.agent.kind": "llm",
        "oma_bridge.run.status": "ok",
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 3,
    }
    assert run.status == "UNSET"
    assert chat.attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 3,
        "gen_ai.response.finish_reasons": ["stop"],  # as the provider said it
    }
    assert run.start_ns <= chat.start_ns <= chat.end_ns <= run.end_ns
    # No prompt or output text unless otel_content = true; never the key.
    assert PROMPT not in values(otlp.spans) and "world" not in values(otlp.spans)
    assert KEY not in repr(otlp.spans)
    assert set(otlp.content_types) == {"application/x-protobuf"}
