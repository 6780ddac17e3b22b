"""The OpenAI-compatible adapter against a fake Chat Completions server on 127.0.0.1."""

from __future__ import annotations

from typing import Any

import pytest
from fake_llm_provider import FakeProvider, ToolCall, Turn, encode_sse, sse_event, sse_reply
from llm_helpers import PNG_B64, backend_for, image, llm_backend_of, run_backend, texts, user

from oma_bridge.backends import text_only
from oma_bridge.backends.llm import ChatRequest
from oma_bridge.errors import InvalidMessageError
from oma_bridge.tools import ToolDefinition

pytestmark = pytest.mark.anyio


async def test_streams_deltas_with_usage_and_sends_data_url_images(
    openai_server: FakeProvider, api_key: str
) -> None:
    openai_server.reply(
        sse_reply(encode_sse("openai", Turn(text=["A ", "cat."], usage=(21, 2))), gap=0.1)
    )
    backend = backend_for("openai", openai_server.base_url, max_tokens=64)
    history = [user("hi"), {"role": "assistant", "content": [{"type": "text", "text": "hello"}]}]

    outcome, events = await run_backend(
        backend, [*history, user("What is this?", image("image/jpeg"))], system_prompt="Be kind."
    )

    assert texts(events) == ["A ", "cat."]  # 100 ms apart: separate reads, separate events
    assert outcome.output == "A cat."
    assert (outcome.token_usage.input_tokens, outcome.token_usage.output_tokens) == (21, 2)
    (request,) = openai_server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {api_key}"
    assert request.body == {
        "model": "m",
        "max_tokens": 64,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": "Be kind."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {
                        "type": "image_url",
                        "image_url": {"url": f"data:image/jpeg;base64,{PNG_B64}"},
                    },
                ],
            },
        ],
    }


async def test_tool_calls_become_tool_messages(openai_server: FakeProvider, api_key: str) -> None:
    async def weather(args: dict[str, Any]) -> dict[str, Any]:
        return {"city": args["city"], "temp": 21}

    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    tool = ToolDefinition(
        name="weather", description="Weather now", input_schema=schema, execute=weather
    )
    openai_server.turn(
        Turn(tool_calls=[ToolCall("call_9", "weather", {"city": "Oslo"})]),
        Turn(text=["21 degrees."]),
    )
    backend = backend_for("openai", openai_server.base_url, tools=(tool,))

    outcome, events = await run_backend(backend, [user("Weather in Oslo?")])

    assert [e.type for e in events] == ["tool_use", "tool_result", "text"]
    assert outcome.output == "21 degrees."
    assert outcome.tool_calls[0].output == '{"city":"Oslo","temp":21}'
    first, second = openai_server.bodies
    assert first["tools"] == [
        {
            "type": "function",
            "function": {"name": "weather", "description": "Weather now", "parameters": schema},
        }
    ]
    assert second["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_9", "content": '{"city":"Oslo","temp":21}'},
    ]


async def test_tool_results_go_first_then_the_rest_of_the_user_turn(
    openai_server: FakeProvider, api_key: str
) -> None:
    openai_server.turn(Turn(text=["ok"]))
    call = {"type": "tool_use", "id": "c1", "name": "f", "input": {}}
    result = {
        "type": "tool_result",
        "tool_use_id": "c1",
        "content": [{"type": "text", "text": "r"}],
    }
    messages = [
        user("go"),
        {"role": "assistant", "content": [{"type": "text", "text": "calling"}, call]},
        user(result, "and now?"),
    ]
    await run_backend(backend_for("openai", openai_server.base_url), messages)  # type: ignore[arg-type]
    sent = openai_server.bodies[0]["messages"]
    assert sent[1]["content"] == "calling"
    assert sent[2:] == [
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "r"}]},
        {"role": "user", "content": "and now?"},
    ]


async def test_reasoning_content_streams_as_reasoning(
    openai_server: FakeProvider, api_key: str
) -> None:
    openai_server.turn(Turn(thinking="Let me think.", text=["Done."]), Turn(text=["x"]))
    outcome, events = await run_backend(backend_for("openai", openai_server.base_url), [user("q")])
    assert [(e.type, e.data) for e in events] == [("reasoning", "Let me think."), ("text", "Done.")]
    # Chat Completions has no place for reasoning: this provider's own is not echoed.
    await run_backend(
        backend_for("openai", openai_server.base_url), [user("q"), outcome.messages[0], user("z")]
    )
    assert openai_server.bodies[1]["messages"][1] == {"role": "assistant", "content": "Done."}


async def test_local_server_without_a_key_gets_no_authorization(
    openai_server: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    openai_server.turn(Turn(text=["local"]))
    backend = backend_for("openai", openai_server.base_url, api_key_env=None)
    outcome, _ = await run_backend(backend, [user("hi")])
    assert outcome.output == "local"
    assert "authorization" not in openai_server.requests[0].headers


async def test_stream_without_done_but_with_finish_reason_is_accepted(
    openai_server: FakeProvider, api_key: str
) -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}
    openai_server.reply(sse_reply([sse_event(chunk)]))
    outcome, _ = await run_backend(backend_for("openai", openai_server.base_url), [user("x")])
    assert outcome.output == "hi"


async def test_chat_is_non_streaming(openai_server: FakeProvider, api_key: str) -> None:
    openai_server.turn(Turn(text=["Hi."], tool_calls=[ToolCall("c", "f", {"k": 1})], usage=(4, 3)))
    backend = backend_for("openai", openai_server.base_url)
    response = await backend.adapter.chat(ChatRequest("m", [user("hi")]))
    await backend.aclose()
    assert response.content == [
        {"type": "text", "text": "Hi."},
        {"type": "tool_use", "id": "c", "name": "f", "input": {"k": 1}},
    ]
    assert (response.usage.input_tokens, response.usage.output_tokens) == (4, 3)
    assert "stream" not in openai_server.bodies[0]


async def test_adapter_guards_messages(openai_server: FakeProvider, api_key: str) -> None:
    adapter = backend_for("openai", openai_server.base_url).adapter
    bad = ChatRequest("m", [{"role": "system", "content": []}])  # type: ignore[list-item]
    with pytest.raises(InvalidMessageError):
        await adapter.chat(bad)
    with pytest.raises(InvalidMessageError):
        await adapter.stream(bad).__anext__()
    assert openai_server.requests == []


async def test_assistant_turn_of_own_reasoning_only_is_sent_as_empty_text(
    openai_server: FakeProvider, api_key: str
) -> None:
    openai_server.turn(Turn(text=["ok"]))
    own = {"type": "reasoning", "text": "hmm", "provenance": "openai"}
    messages = [user("a"), {"role": "assistant", "content": [own]}, user("b")]
    await run_backend(backend_for("openai", openai_server.base_url), messages)  # type: ignore[arg-type]
    assert openai_server.bodies[0]["messages"][1] == {"role": "assistant", "content": ""}


def test_factory_defaults() -> None:
    from oma_bridge.agent import AgentConfig
    from oma_bridge.backends.llm import (
        AnthropicAdapter,
        EchoAdapter,
        OpenAIAdapter,
    )

    default = llm_backend_of(AgentConfig(name="d", model="claude"))
    assert isinstance(default.adapter, AnthropicAdapter)  # provider unset: anthropic, as in OMA
    assert default.adapter.url == "https://api.anthropic.com/v1/messages"
    assert default.adapter.http.key.env_var == "ANTHROPIC_API_KEY"
    openai = llm_backend_of(AgentConfig(name="o", provider="openai", model="gpt"))
    assert isinstance(openai.adapter, OpenAIAdapter)
    assert openai.adapter.url == "https://api.openai.com/v1/chat/completions"
    assert (openai.adapter.http.key.env_var, openai.adapter.http.key.required) == (
        "OPENAI_API_KEY",
        True,
    )
    ollama = llm_backend_of(
        AgentConfig(
            name="l", provider="openai", model="llama3", base_url="http://localhost:11434/v1/"
        )
    )
    assert isinstance(ollama.adapter, OpenAIAdapter)
    assert ollama.adapter.url == "http://localhost:11434/v1/chat/completions"
    assert ollama.adapter.http.key.required is False
    assert isinstance(llm_backend_of(AgentConfig(name="e", provider="echo")).adapter, EchoAdapter)
    assert (text_only(openai.kind), openai.kind) == (False, "llm")
