"""Provider faults end as clear failed results, never hangs, never a leaked key."""

from __future__ import annotations

import logging
import time

import anyio
import pytest
from fake_llm_provider import (
    Conn,
    FakeProvider,
    Recorded,
    Turn,
    encode_sse,
    error_reply,
    sse_event,
    sse_reply,
    stall_reply,
)
from llm_helpers import backend_for, image, llm_backend_of, run_backend, user

from oma_bridge import Agent
from oma_bridge.agent import AgentConfig
from oma_bridge.errors import LLMCallTimeoutError, ProviderError
from oma_bridge.results import AgentRunResult, StreamEvent

pytestmark = pytest.mark.anyio


def agent_for(server: FakeProvider, **config: object) -> Agent:
    return Agent(
        AgentConfig(
            name="faulty",
            provider=server.flavor,
            model="m",
            base_url=server.base_url,
            api_key_env="OMA_TEST_KEY",
            **config,  # type: ignore[arg-type]
        )
    )


async def stream_all(agent: Agent, prompt: str) -> tuple[list[StreamEvent], AgentRunResult]:
    async with agent:
        events = [event async for event in agent.stream(prompt)]
    assert events[-1].type == "done"
    return events, events[-1].data


def assert_failed(result: AgentRunResult, code: str, kind: str, *needles: str) -> None:
    assert not result.success
    assert result.status.code == code
    assert result.error_info is not None
    assert result.error_info.kind == kind
    for needle in needles:
        assert needle in (result.error_info.message or "")


@pytest.mark.parametrize("flavor", ["anthropic", "openai"])
async def test_401_fails_at_once_with_the_providers_words_and_no_key(
    flavor: str,
    anthropic_server: FakeProvider,
    openai_server: FakeProvider,
    api_key: str,
) -> None:
    server = anthropic_server if flavor == "anthropic" else openai_server
    server.reply(error_reply(401, f"Incorrect API key provided: {api_key}"))
    async with agent_for(server) as agent:
        result = await agent.run("hi")
    assert_failed(result, "error", "provider", "HTTP 401", "Incorrect API key provided")
    assert result.error_info is not None
    assert result.error_info.code == "PROVIDER_ERROR"
    assert api_key not in repr(result.to_wire())
    assert len(server.requests) == 1  # a 4xx other than 408/409/429 is not retried


async def test_429_waits_for_retry_after_then_succeeds(
    anthropic_server: FakeProvider, api_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    anthropic_server.reply(
        error_reply(429, f"rate limited for key {api_key}", {"retry-after": "1"})
    )
    anthropic_server.turn(Turn(text=["fine"]))
    started = time.monotonic()
    async with agent_for(anthropic_server) as agent:
        result = await agent.run("hi")
    assert result.success, result.to_wire()
    assert result.output == "fine"
    assert time.monotonic() - started >= 0.9
    assert len(anthropic_server.requests) == 2
    assert "HTTP 429: rate limited for key [redacted]" in caplog.text
    assert "retry 1 of 3 in 1.00 s" in caplog.text
    assert api_key not in caplog.text


async def test_retry_after_ms_wins_over_backoff(openai_server: FakeProvider, api_key: str) -> None:
    openai_server.reply(error_reply(429, "slow down", {"retry-after-ms": "300"}))
    openai_server.turn(Turn(text=["ok"]))
    started = time.monotonic()
    outcome, _ = await run_backend(backend_for("openai", openai_server.base_url), [user("x")])
    assert outcome.output == "ok"
    assert time.monotonic() - started >= 0.28  # FAST_RETRY's own backoff is 10 ms


async def test_500_then_success(openai_server: FakeProvider, api_key: str) -> None:
    openai_server.reply(error_reply(500, "internal"), error_reply(503, "overloaded"))
    openai_server.turn(Turn(text=["recovered"]))
    async with agent_for(openai_server) as agent:
        result = await agent.run("hi")
    assert result.success
    assert result.output == "recovered"
    assert len(openai_server.requests) == 3


async def test_persistent_5xx_gives_up_after_the_bounded_attempts(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    anthropic_server.reply(*(error_reply(529, "Overloaded") for _ in range(4)))
    backend = backend_for("anthropic", anthropic_server.base_url)
    with pytest.raises(ProviderError, match="HTTP 529: Overloaded") as caught:
        await run_backend(backend, [user("x")])
    assert caught.value.http_status == 529
    assert len(anthropic_server.requests) == 4


async def test_malformed_sse_line(anthropic_server: FakeProvider, api_key: str) -> None:
    events = encode_sse("anthropic", Turn(text=["partial "]))[:4]
    bad = b"event: content_block_delta\ndata: {oops\n\n"
    # In one network read: the text before the bad line is still shown.
    anthropic_server.reply(sse_reply([b"".join([*events, bad])]))
    events_seen, result = await stream_all(agent_for(anthropic_server), "hi")
    assert_failed(result, "error", "provider", "malformed stream event", "{oops")
    assert [e.data for e in events_seen if e.type == "text"] == ["partial "]


async def test_connection_reset_mid_stream(openai_server: FakeProvider, api_key: str) -> None:
    events = encode_sse("openai", Turn(text=["one ", "two "]))[:2]
    openai_server.reply(sse_reply(events, after="reset"))
    _, result = await stream_all(agent_for(openai_server), "hi")
    assert_failed(result, "error", "provider", "connection lost mid-stream")
    assert len(openai_server.requests) == 1  # bytes were delivered: never replayed


@pytest.mark.parametrize("flavor", ["anthropic", "openai"])
async def test_stream_stalled_past_call_timeout(
    flavor: str, anthropic_server: FakeProvider, openai_server: FakeProvider, api_key: str
) -> None:
    server = anthropic_server if flavor == "anthropic" else openai_server
    server.reply(sse_reply(encode_sse(server.flavor, Turn(text=["a", "b"]))[:3], after="stall"))
    started = time.monotonic()
    with anyio.fail_after(10):
        _, result = await stream_all(agent_for(server, call_timeout_ms=300), "hi")
    assert_failed(result, "timeout", "timeout", "stalled", "call_timeout_ms=300")
    assert result.error_info is not None
    assert result.error_info.code == "LLM_CALL_TIMEOUT"
    assert 0.25 <= time.monotonic() - started < 5


async def test_no_answer_at_all_times_out(anthropic_server: FakeProvider, api_key: str) -> None:
    anthropic_server.reply(stall_reply())
    with anyio.fail_after(10):
        async with agent_for(anthropic_server, call_timeout_ms=300) as agent:
            result = await agent.run("hi")
    assert_failed(result, "timeout", "timeout", "call_timeout_ms=300")


async def test_anthropic_error_event_mid_stream(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    first = encode_sse("anthropic", Turn(text=["x"]))[0]
    anthropic_server.reply(sse_reply([first, sse_event(error, "error")]))
    async with agent_for(anthropic_server) as agent:
        result = await agent.run("hi")
    assert_failed(result, "error", "provider", "stream error: Overloaded (overloaded_error)")


async def test_stream_cut_short_without_message_stop(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    anthropic_server.reply(sse_reply(encode_sse("anthropic", Turn(text=["x"]))[:-1]))
    async with agent_for(anthropic_server) as agent:
        result = await agent.run("hi")
    assert_failed(result, "error", "provider", "stream ended before message_stop")


async def test_openai_stream_cut_short_without_done(
    openai_server: FakeProvider, api_key: str
) -> None:
    openai_server.reply(sse_reply(encode_sse("openai", Turn(text=["x"]))[:2]))
    async with agent_for(openai_server) as agent:
        result = await agent.run("hi")
    assert_failed(result, "error", "provider", "stream ended before [DONE]")


async def test_refused_image_is_sent_and_the_refusal_is_the_result(
    openai_server: FakeProvider, api_key: str
) -> None:
    refusal = "Model text-only-7b does not support image input"
    openai_server.reply(error_reply(400, refusal))
    async with agent_for(openai_server) as agent:
        result = await agent.run([user("look", image())])
    assert_failed(result, "error", "provider", "HTTP 400", refusal)
    parts = openai_server.bodies[0]["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url"]  # sent as given, not dropped


async def test_missing_key_names_the_variable_and_sends_nothing(
    anthropic_server: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMA_TEST_KEY", raising=False)
    async with agent_for(anthropic_server) as agent:
        result = await agent.run("hi")
    assert_failed(result, "error", "provider", "OMA_TEST_KEY", 'Agent "faulty"')
    assert anthropic_server.requests == []


async def test_connection_refused_is_retried_then_fails(api_key: str) -> None:
    with anyio.fail_after(10):
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        await listener.aclose()  # nothing listens there any more
        backend = backend_for("openai", f"http://127.0.0.1:{port}/v1")
        with pytest.raises(ProviderError, match="request failed"):
            await run_backend(backend, [user("x")])


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({"provider": "gemini", "model": "g"}, "unknown provider 'gemini'"),
        ({"provider": "openai", "model": None, "max_turns": 1}, "needs a model"),
    ],
)
async def test_bad_config_fails_the_run_naming_the_field(
    config: dict[str, object], needle: str
) -> None:

    with pytest.raises(ProviderError, match=needle):
        llm_backend_of(AgentConfig(name="cfg", **config))  # type: ignore[arg-type]


async def test_llm_call_timeout_is_an_error_class(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    anthropic_server.reply(stall_reply())
    backend = backend_for("anthropic", anthropic_server.base_url, call_timeout_ms=200)
    with anyio.fail_after(10), pytest.raises(LLMCallTimeoutError):
        await run_backend(backend, [user("x")])


async def test_leaving_a_stream_early_closes_the_provider_connection(
    openai_server: FakeProvider, api_key: str
) -> None:
    client_gone = anyio.Event()

    async def endless(request: Recorded, conn: Conn) -> None:
        await conn.start_sse()
        try:
            for i in range(10_000):
                chunk = {"choices": [{"index": 0, "delta": {"content": f"t{i} "}}]}
                await conn.send_chunk(sse_event(chunk))
                await anyio.sleep(0.01)
        except (anyio.BrokenResourceError, ConnectionError):
            client_gone.set()

    openai_server.reply(endless)
    with anyio.fail_after(10):
        async with agent_for(openai_server) as agent:
            stream = agent.stream("go")
            async for event in stream:
                assert event.type == "text"
                break
            await stream.aclose()
        await client_gone.wait()


async def test_whole_run_timeout_during_a_live_stream_keeps_the_partial_text(
    anthropic_server: FakeProvider, api_key: str
) -> None:
    events = encode_sse("anthropic", Turn(text=["so far "]))[:4]
    anthropic_server.reply(sse_reply(events, after="stall"))
    with anyio.fail_after(10):
        async with agent_for(anthropic_server, timeout_ms=300) as agent:
            result = await agent.run("hi")
    assert_failed(result, "timeout", "timeout", "exceeded whole-run timeout of 300ms")
    assert result.output == "so far "


@pytest.mark.parametrize(
    ("flavor", "event"),
    [
        ("anthropic", {"type": "message_start", "message": None}),
        (
            "anthropic",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use"}},
        ),
        ("openai", {"choices": [{"index": 0, "delta": "not an object"}]}),
        ("openai", {"choices": [{"delta": {"tool_calls": [{"index": "x"}]}}]}),
    ],
)
async def test_json_of_an_unexpected_shape_is_a_provider_error(
    flavor: str,
    event: dict[str, object],
    anthropic_server: FakeProvider,
    openai_server: FakeProvider,
    api_key: str,
) -> None:
    server = anthropic_server if flavor == "anthropic" else openai_server
    server.reply(sse_reply([sse_event(event)]))
    async with agent_for(server) as agent:
        result = await agent.run("hi")
    assert_failed(result, "error", "provider", "unexpected stream event")
