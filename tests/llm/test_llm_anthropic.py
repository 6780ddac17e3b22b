"""The Anthropic adapter against a fake Messages API on 127.0.0.1."""

from __future__ import annotations

from typing import Any

import pytest
from fake_llm_provider import FakeProvider, ToolCall, Turn, encode_sse, sse_reply
from llm_helpers import PNG_B64, backend_for, image, run_backend, texts, user

from oma_bridge.backends.llm import ChatRequest, TextDelta, ToolSpec, TurnEnd
from oma_bridge.errors import InvalidMessageError, ProviderError
from oma_bridge.tools import ToolDefinition

pytestmark = pytest.mark.anyio


async def test_streams_token_deltas_and_sends_system_roles_and_images(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    turn = Turn(text=["It is ", "a red ", "square."], usage=(12, 7))
    anthropic_server.reply(sse_reply(encode_sse("anthropic", turn), gap=0.05))
    backend = backend_for("anthropic", anthropic_server.base_url, max_tokens=256, temperature=0.2)
    history = [user("hi"), {"role": "assistant", "content": [{"type": "text", "text": "hello"}]}]
    messages = [*history, user("What is shown here?", image())]

    outcome, events = await run_backend(backend, messages, system_prompt="Be brief.")

    # Tokens 50 ms apart arrive in separate reads: shown as they come (a
    # machine stalled past a gap may join two, so no exact split is asserted).
    assert len(texts(events)) >= 2
    assert "".join(texts(events)) == "It is a red square."
    assert outcome.output == "It is a red square."
    assert outcome.messages == [
        {"role": "assistant", "content": [{"type": "text", "text": "It is a red square."}]}
    ]
    assert (outcome.token_usage.input_tokens, outcome.token_usage.output_tokens) == (12, 7)
    (request,) = anthropic_server.requests
    assert request.headers["x-api-key"] == api_key
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.body == {
        "model": "m",
        "max_tokens": 256,
        "temperature": 0.2,
        "stream": True,
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is shown here?"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64},
                    },
                ],
            },
        ],
    }


async def test_deltas_of_one_network_read_are_one_text_event(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    burst = b"".join(encode_sse("anthropic", Turn(text=["It is ", "a red ", "square."])))
    anthropic_server.reply(sse_reply([burst]))
    outcome, events = await run_backend(
        backend_for("anthropic", anthropic_server.base_url), [user("x")]
    )
    assert texts(events) == ["It is a red square."]
    assert outcome.output == "It is a red square."


async def test_default_max_tokens_and_no_system_key_without_a_prompt(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    anthropic_server.turn(Turn(text=["ok"]))
    await run_backend(backend_for("anthropic", anthropic_server.base_url), [user("x")])
    body = anthropic_server.bodies[0]
    assert body["max_tokens"] == 4096
    assert "system" not in body
    assert "tools" not in body


async def test_tool_loop_sends_definitions_and_tool_results(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    seen: list[dict[str, Any]] = []

    def add(args: dict[str, Any]) -> int:
        seen.append(args)
        return int(args["a"]) + int(args["b"])

    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
    tool = ToolDefinition(
        name="add", description="Add two numbers", input_schema=schema, execute=add
    )
    anthropic_server.turn(
        Turn(text=["Let me add."], tool_calls=[ToolCall("toolu_1", "add", {"a": 2, "b": 3})]),
        Turn(text=["The sum is 5."], usage=(30, 4)),
    )
    backend = backend_for("anthropic", anthropic_server.base_url, tools=(tool,))

    outcome, events = await run_backend(backend, [user("2+3?")])

    assert seen == [{"a": 2, "b": 3}]
    assert outcome.output == "The sum is 5."
    assert [e.type for e in events] == ["text", "tool_use", "tool_result", "text"]
    tool_use = {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 2, "b": 3}}
    tool_result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "5"}
    assert events[1].data == tool_use
    assert events[2].data == tool_result
    assert outcome.messages == [
        {"role": "assistant", "content": [{"type": "text", "text": "Let me add."}, tool_use]},
        {"role": "user", "content": [tool_result]},
        {"role": "assistant", "content": [{"type": "text", "text": "The sum is 5."}]},
    ]
    assert (outcome.token_usage.input_tokens, outcome.token_usage.output_tokens) == (40, 9)
    (record,) = outcome.tool_calls
    assert (record.tool_name, record.input, record.output) == ("add", {"a": 2, "b": 3}, "5")
    assert record.duration >= 0
    first, second = anthropic_server.bodies
    assert first["tools"] == [
        {"name": "add", "description": "Add two numbers", "input_schema": schema}
    ]
    assert second["messages"][1:] == outcome.messages[:2]


async def test_thinking_streams_as_reasoning_and_is_sent_back_signed(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    anthropic_server.turn(Turn(thinking="Hmm.", text=["Yes."]), Turn(text=["Again."]))
    backend = backend_for("anthropic", anthropic_server.base_url)
    outcome, events = await run_backend(backend, [user("q")])
    assert [(e.type, e.data) for e in events] == [("reasoning", "Hmm."), ("text", "Yes.")]
    reasoning = outcome.messages[0]["content"][0]
    assert reasoning == {
        "type": "reasoning",
        "text": "Hmm.",
        "signature": "sig-1",
        "provenance": "anthropic",
    }

    backend = backend_for("anthropic", anthropic_server.base_url)
    await run_backend(backend, [user("q"), outcome.messages[0], user("again")])
    sent = anthropic_server.bodies[1]["messages"][1]["content"][0]
    assert sent == {"type": "thinking", "thinking": "Hmm.", "signature": "sig-1"}


async def test_chat_is_non_streaming(anthropic_server: FakeProvider, api_key: str) -> None:
    anthropic_server.turn(Turn(text=["Hello there."], usage=(3, 2)))
    backend = backend_for("anthropic", anthropic_server.base_url)
    tools = (ToolSpec("t", "d", {"type": "object"}),)
    response = await backend.adapter.chat(ChatRequest("m", [user("hi")], tools=tools))
    await backend.aclose()
    assert response.content == [{"type": "text", "text": "Hello there."}]
    assert (response.usage.input_tokens, response.usage.output_tokens) == (3, 2)
    assert response.stop_reason == "end_turn"
    assert "stream" not in anthropic_server.bodies[0]


async def test_adapter_guards_messages_at_chat_and_first_stream_iteration(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    adapter = backend_for("anthropic", anthropic_server.base_url).adapter
    bad = ChatRequest("m", [{"role": "user", "content": [image(data="not base64!")]}])  # type: ignore[list-item]
    with pytest.raises(InvalidMessageError, match="base64"):
        await adapter.chat(bad)
    stream = adapter.stream(bad)  # building the iterator does not run the guard...
    with pytest.raises(InvalidMessageError, match="base64"):
        await stream.__anext__()  # ...its first iteration does
    assert anthropic_server.requests == []


async def test_adapter_stream_yields_deltas_then_turn_end(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    anthropic_server.turn(Turn(text=["a", "b"]))
    adapter = backend_for("anthropic", anthropic_server.base_url).adapter
    deltas = [d async for d in adapter.stream(ChatRequest("m", [user("x")]))]
    await adapter.aclose()
    assert deltas[:2] == [TextDelta("a"), TextDelta("b")]
    assert isinstance(deltas[2], TurnEnd)
    assert deltas[2].response.text == "ab"


async def test_blocks_from_other_providers_and_tool_result_parts(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    anthropic_server.turn(Turn(text=["ok"]))
    call = {"type": "tool_use", "id": "t1", "name": "look", "input": {}, "signature": "gemini"}
    result = {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [{"type": "text", "text": "a picture"}, image()],
        "is_error": False,
    }
    foreign = {"type": "reasoning", "text": "I think", "provenance": "openai"}
    redacted = {
        "type": "reasoning",
        "text": "",
        "redactedData": "opaque",
        "provenance": "anthropic",
    }
    messages = [
        user("look"),
        {"role": "assistant", "content": [foreign, redacted, call]},
        user(result),
    ]
    await run_backend(backend_for("anthropic", anthropic_server.base_url), messages)  # type: ignore[arg-type]
    sent = anthropic_server.bodies[0]["messages"]
    assert sent[1]["content"] == [
        {"type": "text", "text": "<thinking>I think</thinking>"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "tool_use", "id": "t1", "name": "look", "input": {}},
    ]
    assert sent[2]["content"] == [result]


async def test_unknown_block_is_sent_as_given_and_the_refusal_is_the_error(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    video = {
        "type": "video",
        "source": {"type": "base64", "media_type": "video/mp4", "data": "AA=="},
    }
    backend = backend_for("anthropic", anthropic_server.base_url)
    with pytest.raises(ProviderError, match=r"HTTP 400: .*unknown block type 'video'"):
        await run_backend(backend, [user("watch", video)])
    assert anthropic_server.bodies[0]["messages"][0]["content"][1] == video
    anthropic_server.violations.clear()  # the refusal was the point
