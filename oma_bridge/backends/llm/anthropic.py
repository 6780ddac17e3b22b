"""The ``anthropic`` provider: the Messages API (``POST /v1/messages``).

Blocks go out as given: OMA's blocks are Anthropic's shapes already (text,
base64 image, tool_use, tool_result), unknown block types pass unchanged and
a block the model cannot take is for the provider to refuse.  Two
translations only: ``reasoning`` becomes ``thinking`` (with its signature) or
``redacted_thinking``, or ``<thinking>`` text when it carries neither (it
came from another provider and Anthropic would refuse an unsigned thinking
block); a ``tool_use`` drops ``signature``, Gemini's field.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from typing import Any

import orjson

from oma_bridge.backends.llm.http import SHAPE_ERRORS, ProviderHTTP, error_text
from oma_bridge.backends.llm.sse import SSEEvent, malformed_event
from oma_bridge.backends.llm.types import (
    ChatRequest,
    ChatResponse,
    ReasoningDelta,
    StreamDelta,
    TextDelta,
    ToolUseDelta,
    TurnBuilder,
    TurnEnd,
)
from oma_bridge.errors import ProviderError
from oma_bridge.messages import LLMMessage, validate_messages
from oma_bridge.results import TokenUsage

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_MAX_TOKENS", "AnthropicAdapter", "build_body"]

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
#: The Messages API requires ``max_tokens``; used when the config sets none.
DEFAULT_MAX_TOKENS = 4096
PROVIDER = "anthropic"


def _tool_use(block: Mapping[str, Any]) -> dict[str, Any]:
    """A tool_use block without OMA's extra fields (``signature`` is Gemini's)."""
    return {"type": "tool_use", "id": block["id"], "name": block["name"], "input": block["input"]}


def _block(block: Mapping[str, Any]) -> dict[str, Any]:
    kind = block["type"]
    if kind == "reasoning":
        if block.get("signature"):
            return {"type": "thinking", "thinking": block["text"], "signature": block["signature"]}
        if block.get("redactedData"):
            return {"type": "redacted_thinking", "data": block["redactedData"]}
        return {"type": "text", "text": f"<thinking>{block['text']}</thinking>"}
    if kind == "tool_use":
        return _tool_use(block)
    return dict(block)


def _message(message: LLMMessage) -> dict[str, Any]:
    return {"role": message["role"], "content": [_block(b) for b in message["content"]]}


def build_body(request: ChatRequest, *, stream: bool) -> dict[str, Any]:
    """The JSON body of a Messages API call."""
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
        "messages": [_message(m) for m in request.messages],
    }
    if request.system_prompt:
        body["system"] = request.system_prompt
    if request.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in request.tools
        ]
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if stream:
        body["stream"] = True
    return body


def _from_provider(block: Mapping[str, Any]) -> dict[str, Any]:
    """An answer block in OMA's shapes."""
    kind = block.get("type")
    if kind == "thinking":
        reasoning: dict[str, Any] = {"type": "reasoning", "text": block.get("thinking", "")}
        if block.get("signature"):
            reasoning["signature"] = block["signature"]
        reasoning["provenance"] = PROVIDER
        return reasoning
    if kind == "redacted_thinking":
        return {
            "type": "reasoning",
            "text": "",
            "redactedData": block.get("data", ""),
            "provenance": PROVIDER,
        }
    if kind == "tool_use":
        return _tool_use(block)
    return dict(block)


def _usage(raw: Any, into: TokenUsage) -> None:
    """Anthropic reports input once (``message_start``) and output cumulatively."""
    if not isinstance(raw, dict):
        return
    if isinstance(raw.get("input_tokens"), int):
        into.input_tokens = raw["input_tokens"]
    if isinstance(raw.get("output_tokens"), int):
        into.output_tokens = raw["output_tokens"]


class AnthropicAdapter:
    """The :class:`~oma_bridge.backends.llm.types.LLMAdapter` of the Messages API."""

    provider = PROVIDER

    def __init__(self, http: ProviderHTTP, base_url: str | None = None) -> None:
        self.http = http
        self.url = (base_url or DEFAULT_BASE_URL).rstrip("/") + "/v1/messages"

    def _headers(self) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION, "accept": "application/json"}
        key = self.http.api_key()
        if key is not None:
            headers["x-api-key"] = key
        return headers

    async def chat(self, request: ChatRequest) -> ChatResponse:
        validate_messages(request.messages)
        data = await self.http.post_json(
            self.url, self._headers(), build_body(request, stream=False)
        )
        try:
            response = ChatResponse([_from_provider(b) for b in data["content"]])  # type: ignore[misc]
            _usage(data.get("usage"), response.usage)
            response.stop_reason = data.get("stop_reason")
        except SHAPE_ERRORS:
            raise self.http.error(f"unexpected answer: {str(data)[:200]}") from None
        return response

    async def stream(self, request: ChatRequest) -> AsyncGenerator[StreamDelta, None]:
        validate_messages(request.messages)
        decoder = _StreamDecoder(self.http)
        body = build_body(request, stream=True)
        async with aclosing(self.http.stream(self.url, self._headers(), body, decoder)) as deltas:
            async for delta in deltas:
                yield delta
        if not decoder.finished:
            raise self.http.error("stream ended before message_stop")

    async def aclose(self) -> None:
        await self.http.aclose()


class _StreamDecoder:
    """Anthropic's event sequence → deltas, and the assembled turn at ``message_stop``."""

    def __init__(self, http: ProviderHTTP) -> None:
        self.http = http
        self.turn = TurnBuilder()
        #: Open blocks by index: the tool_use being built and its JSON pieces,
        #: or the reasoning block that a signature delta completes.
        self.tool: dict[int, tuple[dict[str, Any], list[str]]] = {}
        self.reasoning: dict[int, dict[str, Any]] = {}
        self.finished = False
        self.failure: ProviderError | None = None

    def batch(self, events: list[SSEEvent]) -> list[StreamDelta]:
        """The deltas of one network read; its text deltas joined (see ``flush_text``)."""
        out: list[StreamDelta] = []
        text: list[str] = []
        try:
            for event in events:
                try:
                    data = orjson.loads(event.data)
                except orjson.JSONDecodeError:
                    raise malformed_event(event, PROVIDER) from None
                # The hot path, once per token (a data of another shape raises
                # a SHAPE_ERRORS, reported as such).
                if data.get("type") == "content_block_delta":
                    delta = data["delta"]
                    if delta.get("type") == "text_delta":
                        text.append(delta["text"])
                        continue
                self.turn.flush_text(text, out)
                handled = self.handle(data, event)
                if handled is not None:
                    out.append(handled)
                if self.finished:
                    break
        # A failure is raised after the text that came before it is shown.
        except ProviderError as error:
            self.failure = error
        except SHAPE_ERRORS as error:  # JSON, but not the provider's documented shape
            self.failure = self.http.error(f"unexpected stream event: {error!r}")
        self.turn.flush_text(text, out)
        return out

    def handle(self, data: Any, event: SSEEvent) -> StreamDelta | None:
        """One decoded event; the delta it completes, if any."""
        kind = data.get("type") if isinstance(data, dict) else None
        if kind == "content_block_delta":
            return self._delta(data)
        if kind == "content_block_start":
            return self._start(data)
        if kind == "content_block_stop":
            return self._stop(data)
        if kind == "message_start":
            _usage(data.get("message", {}).get("usage"), self.turn.usage)
        elif kind == "message_delta":
            _usage(data.get("usage"), self.turn.usage)
            stop = data.get("delta", {}).get("stop_reason")
            if stop is not None:
                self.turn.stop_reason = stop
        elif kind == "message_stop":
            self.finished = True
            return TurnEnd(self.turn.response())
        elif kind == "error":
            raise self.http.error(f"stream error: {error_text(data) or repr(event.data)}")
        # "ping" and event types added later are ignored, as the API asks.
        return None

    def _delta(self, data: dict[str, Any]) -> StreamDelta | None:
        delta = data.get("delta", {})
        index = data.get("index", -1)
        kind = delta.get("type")  # text_delta never gets here: batch() takes it
        if kind == "input_json_delta" and index in self.tool:
            self.tool[index][1].append(delta.get("partial_json", ""))
        elif kind == "thinking_delta":
            self.reasoning[index] = self.turn.reasoning(delta["thinking"], PROVIDER)
            return ReasoningDelta(delta["thinking"])
        elif kind == "signature_delta" and index in self.reasoning:
            self.reasoning[index]["signature"] = delta["signature"]
        return None

    def _start(self, data: dict[str, Any]) -> StreamDelta | None:
        self.turn.boundary()
        block = data.get("content_block", {})
        index = data.get("index", -1)
        kind = block.get("type")
        if kind == "tool_use":
            self.tool[index] = ({"type": "tool_use", "id": block["id"], "name": block["name"]}, [])
        elif kind == "thinking":
            thinking = block.get("thinking", "")
            self.reasoning[index] = self.turn.reasoning(thinking, PROVIDER)
            return ReasoningDelta(thinking) if thinking else None
        elif kind == "redacted_thinking":
            self.turn.block(_from_provider(block))
        elif kind == "text":
            self.turn.text(block.get("text", ""))
            return TextDelta(block["text"]) if block.get("text") else None
        elif isinstance(kind, str):  # a block type newer than this adapter: keep it whole
            self.turn.block(dict(block))
        return None

    def _stop(self, data: dict[str, Any]) -> ToolUseDelta | None:
        index = data.get("index", -1)
        self.reasoning.pop(index, None)
        if index not in self.tool:
            return None
        block, pieces = self.tool.pop(index)
        raw = "".join(pieces)
        try:
            block["input"] = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            raise self.http.error(f"tool_use {block['name']!r} input is not JSON") from None
        self.turn.block(block)
        return ToolUseDelta(block)
