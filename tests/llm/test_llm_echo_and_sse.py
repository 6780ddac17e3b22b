"""The echo provider (PROTOCOL.md §10, §11.31) and the shared SSE parser."""

from __future__ import annotations

import httpx
import pytest
from fake_llm_provider import FakeProvider
from hypothesis import given
from hypothesis import strategies as st
from llm_helpers import image, llm_backend_of, run_backend, texts, user

from oma_bridge import Agent
from oma_bridge.agent import AgentConfig
from oma_bridge.backends.llm import ChatRequest, EchoAdapter
from oma_bridge.backends.llm.sse import SSEDecoder, SSEEvent, malformed_event
from oma_bridge.errors import InvalidMessageError, ProviderError

pytestmark = pytest.mark.anyio


def echo_backend():  # type: ignore[no-untyped-def]
    return llm_backend_of(AgentConfig(name="e", provider="echo", model="echo-1"))


async def test_echo_renders_the_last_user_message_as_the_protocol_example() -> None:
    outcome, events = await run_backend(
        echo_backend(), [user("What is shown here?", image("image/png"))]
    )
    assert outcome.output == "What is shown here? [image:image/png]"
    assert texts(events) == ["What ", "is ", "shown ", "here? ", "[image:image/png]"]
    assert "".join(texts(events)) == outcome.output
    assert (outcome.token_usage.input_tokens, outcome.token_usage.output_tokens) == (4, 5)


async def test_echo_system_prompt_other_blocks_and_token_counts() -> None:
    call = {"type": "tool_use", "id": "t", "name": "f", "input": {}}
    messages = [
        user("one two"),
        {"role": "assistant", "content": [{"type": "text", "text": "three"}, call]},
        user(
            {"type": "tool_result", "tool_use_id": "t", "content": "not counted"},
            "four  five",
        ),
    ]
    outcome, events = await run_backend(
        echo_backend(),
        messages,  # type: ignore[arg-type]
        system_prompt="Be terse.",
    )
    assert outcome.output == "(system: Be terse.) [tool_result] four  five"
    assert "".join(texts(events)) == outcome.output
    # input: system (2) + text blocks of every message (2 + 1 + 2); output: 6 words written.
    assert (outcome.token_usage.input_tokens, outcome.token_usage.output_tokens) == (7, 6)
    assert outcome.messages == [
        {"role": "assistant", "content": [{"type": "text", "text": outcome.output}]}
    ]


async def test_echo_through_agent_stream_and_run() -> None:
    async with Agent(AgentConfig(name="echo", provider="echo")) as agent:
        events = [e async for e in agent.stream("hello brave world")]
        result = await agent.run([user("Hi", image("image/webp"))])
    assert [(e.type, e.data) for e in events[:-1]] == [
        ("text", "hello "),
        ("text", "brave "),
        ("text", "world"),
    ]
    done = events[-1]
    assert done.type == "done"
    assert done.data.output == "hello brave world"
    assert result.success
    assert result.output == "Hi [image:image/webp]"


async def test_echo_guards_messages() -> None:
    bad = ChatRequest("echo-1", [{"role": "user", "content": "nope"}])  # type: ignore[list-item]
    with pytest.raises(InvalidMessageError):
        await EchoAdapter().chat(bad)
    with pytest.raises(InvalidMessageError):
        await EchoAdapter().stream(bad).__anext__()


# -- SSE ------------------------------------------------------------------------


def decode(*chunks: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events = [event for chunk in chunks for event in decoder.feed(chunk)]
    return events + decoder.close()


def test_sse_fields_comments_multiline_data_and_line_endings() -> None:
    stream = (
        b": keep-alive\n"
        b"event: ping\ndata: {}\n\n"
        b"data: line one\r\ndata:line two\r\n\r\n"
        b"id: 7\rretry: 10\rdata: cr\r\r"
        b"unknown: field\ndata: x\n\n"
        b"data: unterminated"
    )
    assert decode(stream) == [
        SSEEvent("ping", b"{}"),
        SSEEvent("message", b"line one\nline two"),
        SSEEvent("message", b"cr"),
        SSEEvent("message", b"x"),
    ]


@given(st.data())
def test_sse_chunking_never_changes_the_events(data: st.DataObject) -> None:
    stream = b"event: a\r\ndata: 1\r\n\r\n: c\ndata: 2\ndata: 3\n\n" * 3 + b"data: 4\r\r"
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    pieces = [stream[i:j] for i, j in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    assert decode(*pieces) == decode(stream)


_LF_STREAM = (
    b"event: message_start\ndata: {}\n\n"
    b": ping\n\n\n"
    b"data: a\ndata: b\n\n"
    b"event: x\nid: 3\ndata: c\n\n"
    b"data:tight\n\n"
    b"data: [DONE]\n\n"
    b"data: dropped at the end\n"
)


@given(st.data())
def test_sse_fast_path_matches_the_line_rules_under_any_chunking(data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(_LF_STREAM)), max_size=12)))
    bounds = zip([0, *cuts], [*cuts, len(_LF_STREAM)], strict=True)
    pieces = [_LF_STREAM[i:j] for i, j in bounds]
    assert decode(*pieces) == [
        SSEEvent("message_start", b"{}"),
        SSEEvent("message", b"a\nb"),
        SSEEvent("x", b"c"),
        SSEEvent("message", b"tight"),
        SSEEvent("message", b"[DONE]"),
    ]


def reference_sse(stream: bytes) -> list[SSEEvent]:
    """The WHATWG event-stream rules, written plainly (no chunking, no fast paths)."""
    text = stream.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    events, name, data = [], "", []
    for line in text.split(b"\n")[:-1]:  # the last piece has no line end
        if not line:
            if data:
                events.append(SSEEvent(name or "message", b"\n".join(data)))
            name, data = "", []
            continue
        if line.startswith(b":"):
            continue
        field, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if field == b"data":
            data.append(value)
        elif field == b"event":
            name = value.decode()
    return events


_LINES = st.sampled_from(
    [b"", b"data: {}", b"data:x", b"data", b"event: message_stop", b"event:e", b": ping", b"id: 1"]
)
_ENDINGS = st.sampled_from([b"\n", b"\r\n", b"\r"])


@given(st.lists(st.tuples(_LINES, _ENDINGS), max_size=30), st.data())
def test_sse_decoder_matches_the_reference_rules(
    lines: list[tuple[bytes, bytes]], data: st.DataObject
) -> None:
    stream = b"".join(line + end for line, end in lines)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    pieces = [stream[i:j] for i, j in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    assert decode(*pieces) == reference_sse(stream)


def test_malformed_event_error_quotes_the_data_redacted() -> None:
    error = malformed_event(SSEEvent("message", b'{"api_key": "sk-live-123456789"'), "openai")
    assert isinstance(error, ProviderError)
    assert error.provider == "openai"
    assert "malformed stream event" in error.message
    assert "sk-live-123456789" not in error.message


# -- the fake provider itself catches what the real APIs refuse -------------------


async def test_fake_providers_refuse_malformed_requests(
    anthropic_server: FakeProvider, openai_server: FakeProvider
) -> None:
    bad_anthropic = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "no"},
            {"role": "user", "content": [image(data="@@"), {"type": "tool_result"}]},
        ],
    }
    bad_openai = {
        "model": "m",
        "stream": True,
        "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}],
    }
    async with httpx.AsyncClient() as client:
        a = await client.post(
            anthropic_server.base_url + "/v1/messages",
            json=bad_anthropic,
            headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
        )
        o = await client.post(openai_server.base_url + "/chat/completions", json=bad_openai)
    assert (a.status_code, o.status_code) == (400, 400)
    assert {
        "max_tokens: field required",
        "messages.0.role: must be user or assistant (system goes in `system`)",
        "messages.1.content.0.source.data: must be base64",
        "messages.1.content.1: tool_result without a tool_use in the previous message",
    } <= set(anthropic_server.violations)
    assert {
        "stream_options.include_usage expected with stream",
        "messages[0].content[0].type: unknown content part 'image'",
    } <= set(openai_server.violations)
    anthropic_server.violations.clear()
    openai_server.violations.clear()
