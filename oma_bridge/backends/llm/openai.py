"""The ``openai`` provider: Chat Completions (``POST {base_url}/chat/completions``).

``base_url`` points it at any compatible server: OpenAI
(``https://api.openai.com/v1``, the default), Ollama
(``http://localhost:11434/v1``), vLLM, LM Studio, llama.cpp's server,
OpenRouter.

Translation of OMA's blocks, each sent as given (no capability guessing: a
server that cannot take an image refuses it, and the run fails with its
words):

* system prompt → a leading ``system`` message;
* image → an ``image_url`` part holding a ``data:`` URL;
* ``tool_result`` blocks of a user message → ``tool`` messages (placed first,
  as the API wants them right after the assistant's ``tool_calls``);
* ``tool_use`` → ``tool_calls`` with JSON ``arguments``;
* a user message of a single text block → a plain string (the form every
  compatible server accepts), anything else → a list of parts;
* reasoning this provider produced is not echoed (Chat Completions has no
  place for it and some servers refuse it); reasoning from another provider
  becomes ``<thinking>`` text;
* unknown block types pass unchanged as parts.
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

__all__ = ["DEFAULT_BASE_URL", "OpenAIAdapter", "build_body"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
PROVIDER = "openai"
_DONE = b"[DONE]"


def _data_url(source: Mapping[str, Any]) -> str:
    if source.get("type") == "url":
        return str(source["url"])
    return f"data:{source['media_type']};base64,{source['data']}"


def _part(block: Mapping[str, Any]) -> dict[str, Any] | None:
    """One content part; ``None`` for reasoning of this provider (not echoed)."""
    kind = block["type"]
    if kind == "text":
        return {"type": "text", "text": block["text"]}
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": _data_url(block["source"])}}
    if kind == "file":
        return {
            "type": "file",
            "file": {"filename": block["filename"], "file_data": _data_url(block["source"])},
        }
    if kind == "reasoning":
        if block.get("provenance") == PROVIDER:
            return None
        return {"type": "text", "text": f"<thinking>{block['text']}</thinking>"}
    return dict(block)


def _tool_message(block: Mapping[str, Any]) -> dict[str, Any]:
    content = block["content"]
    if not isinstance(content, str):
        content = [p for p in (_part(part) for part in content) if p is not None]
    return {"role": "tool", "tool_call_id": block["tool_use_id"], "content": content}


def _user(message: LLMMessage) -> list[dict[str, Any]]:
    blocks: list[Any] = message["content"]
    out = [_tool_message(b) for b in blocks if b["type"] == "tool_result"]
    rest = [b for b in blocks if b["type"] != "tool_result"]
    if len(rest) == 1 and rest[0]["type"] == "text":
        out.append({"role": "user", "content": rest[0]["text"]})
    elif rest or not out:
        parts = [p for p in (_part(b) for b in rest) if p is not None]
        out.append({"role": "user", "content": parts})
    return out


def _assistant(message: LLMMessage) -> dict[str, Any]:
    blocks: list[Any] = message["content"]
    calls = [
        {
            "id": b["id"],
            "type": "function",
            "function": {"name": b["name"], "arguments": orjson.dumps(b["input"]).decode()},
        }
        for b in blocks
        if b["type"] == "tool_use"
    ]
    parts = [p for p in (_part(b) for b in blocks if b["type"] != "tool_use") if p is not None]
    content: Any
    if all(p["type"] == "text" for p in parts):
        # No text: null beside tool_calls (as OpenAI answers), else "" (null
        # alone is refused; a turn of this provider's reasoning only gets here).
        content = "".join(p["text"] for p in parts) if parts else (None if calls else "")
    else:
        content = parts
    out: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        out["tool_calls"] = calls
    return out


def build_body(request: ChatRequest, *, stream: bool) -> dict[str, Any]:
    """The JSON body of a Chat Completions call."""
    messages: list[dict[str, Any]] = []
    if request.system_prompt:
        messages.append({"role": "system", "content": request.system_prompt})
    for message in request.messages:
        if message["role"] == "assistant":
            messages.append(_assistant(message))
        else:
            messages.extend(_user(message))
    body: dict[str, Any] = {"model": request.model, "messages": messages}
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                },
            }
            for t in request.tools
        ]
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def _usage(raw: Any, into: TokenUsage) -> None:
    if isinstance(raw, dict):
        into.input_tokens = int(raw.get("prompt_tokens") or 0)
        into.output_tokens = int(raw.get("completion_tokens") or 0)


def _reasoning_text(delta: Mapping[str, Any]) -> str | None:
    """vLLM and DeepSeek say ``reasoning_content``; Ollama and OpenRouter ``reasoning``."""
    text = delta.get("reasoning_content") or delta.get("reasoning")
    return text if isinstance(text, str) and text else None


class OpenAIAdapter:
    """The :class:`~oma_bridge.backends.llm.types.LLMAdapter` of Chat Completions."""

    provider = PROVIDER

    def __init__(self, http: ProviderHTTP, base_url: str | None = None) -> None:
        self.http = http
        self.url = (base_url or DEFAULT_BASE_URL).rstrip("/") + "/chat/completions"

    def _headers(self) -> dict[str, str]:
        key = self.http.api_key()
        return {"authorization": f"Bearer {key}"} if key is not None else {}

    async def chat(self, request: ChatRequest) -> ChatResponse:
        validate_messages(request.messages)
        data = await self.http.post_json(
            self.url, self._headers(), build_body(request, stream=False)
        )
        try:
            return self._answer(data)
        except SHAPE_ERRORS:
            raise self.http.error(f"unexpected answer: {str(data)[:200]}") from None

    def _answer(self, data: Any) -> ChatResponse:
        message = data["choices"][0]["message"]
        turn = TurnBuilder()
        reasoning = _reasoning_text(message)
        if reasoning:
            turn.reasoning(reasoning, PROVIDER)
            turn.boundary()
        if isinstance(message.get("content"), str) and message["content"]:
            turn.text(message["content"])
        calls = _ToolCalls(self.http)
        for i, call in enumerate(message.get("tool_calls") or []):
            calls.add({**call, "index": i})
        for block in calls.blocks():
            turn.block(block)
        _usage(data.get("usage"), turn.usage)
        turn.stop_reason = data["choices"][0].get("finish_reason")
        return turn.response()

    async def stream(self, request: ChatRequest) -> AsyncGenerator[StreamDelta, None]:
        validate_messages(request.messages)
        decoder = _StreamDecoder(self.http)
        body = build_body(request, stream=True)
        async with aclosing(self.http.stream(self.url, self._headers(), body, decoder)) as deltas:
            async for delta in deltas:
                yield delta
        # Some servers end without "[DONE]"; a finish_reason says the turn was whole.
        if not decoder.finished and decoder.turn.stop_reason is None:
            raise self.http.error("stream ended before [DONE]")
        for delta in decoder.finish():
            yield delta

    async def aclose(self) -> None:
        await self.http.aclose()


class _StreamDecoder:
    """Chat Completions chunks → deltas; :meth:`finish` assembles the turn."""

    def __init__(self, http: ProviderHTTP) -> None:
        self.http = http
        self.turn = TurnBuilder()
        self.calls = _ToolCalls(http)
        self.finished = False
        self.failure: ProviderError | None = None

    def batch(self, events: list[SSEEvent]) -> list[StreamDelta]:
        """The deltas of one network read; its text deltas joined (see ``flush_text``)."""
        out: list[StreamDelta] = []
        text: list[str] = []
        try:
            for event in events:
                if event.data == _DONE:
                    self.finished = True
                    break
                try:
                    data = orjson.loads(event.data)
                except orjson.JSONDecodeError:
                    raise malformed_event(event, PROVIDER) from None
                # The hot path, once per token: one choice whose delta is just
                # a piece of text (a data of another shape raises a SHAPE_ERRORS).
                choices = data.get("choices")
                if choices and len(choices) == 1:
                    choice = choices[0]
                    delta = choice.get("delta")
                    if (
                        type(delta) is dict
                        and len(delta) == 1
                        and type(piece := delta.get("content")) is str
                        and not choice.get("finish_reason")
                        and not data.get("usage")
                    ):
                        text.append(piece)
                        continue
                self.turn.flush_text(text, out)
                out += self.handle(data, event)
        # A failure is raised after the text that came before it is shown.
        except ProviderError as error:
            self.failure = error
        except SHAPE_ERRORS as error:  # JSON, but not the provider's documented shape
            self.failure = self.http.error(f"unexpected stream event: {error!r}")
        self.turn.flush_text(text, out)
        return out

    def handle(self, data: Any, event: SSEEvent) -> list[StreamDelta]:
        """One decoded chunk; the deltas it carries."""
        if not isinstance(data, dict):
            return []
        if "error" in data:
            raise self.http.error(f"stream error: {error_text(data) or repr(event.data)}")
        deltas: list[StreamDelta] = []
        for choice in data.get("choices") or ():
            delta = choice.get("delta") or {}
            if len(delta) > 1 or "content" not in delta:  # rarer keys, off the hot path
                deltas += self._rest(delta)
            text = delta.get("content")
            if isinstance(text, str) and text:
                self.turn.text(text)
                deltas.append(TextDelta(text))
            if choice.get("finish_reason"):
                self.turn.stop_reason = choice["finish_reason"]
        if data.get("usage"):
            _usage(data["usage"], self.turn.usage)
        return deltas

    def _rest(self, delta: Mapping[str, Any]) -> list[StreamDelta]:
        for call in delta.get("tool_calls") or ():
            self.calls.add(call)
        reasoning = _reasoning_text(delta)
        if reasoning:
            self.turn.reasoning(reasoning, PROVIDER)
            return [ReasoningDelta(reasoning)]
        return []

    def finish(self) -> list[StreamDelta]:
        deltas: list[StreamDelta] = []
        for block in self.calls.blocks():
            self.turn.block(block)
            deltas.append(ToolUseDelta(block))
        deltas.append(TurnEnd(self.turn.response()))
        return deltas


class _ToolCalls:
    """Tool calls arrive in pieces keyed by ``index``: id and name once, arguments in bits."""

    def __init__(self, http: ProviderHTTP) -> None:
        self.http = http
        self.calls: dict[int, dict[str, Any]] = {}

    def add(self, piece: Mapping[str, Any]) -> None:
        call = self.calls.setdefault(int(piece.get("index", 0)), {"arguments": []})
        function = piece.get("function") or {}
        if piece.get("id"):
            call["id"] = piece["id"]
        if function.get("name"):
            call["name"] = function["name"]
        if function.get("arguments"):
            call["arguments"].append(function["arguments"])

    def blocks(self) -> list[dict[str, Any]]:
        blocks = []
        for index in sorted(self.calls):
            call = self.calls[index]
            name = call.get("name", "")
            raw = "".join(call["arguments"])
            try:
                arguments = orjson.loads(raw) if raw.strip() else {}
            except orjson.JSONDecodeError:
                raise self.http.error(f"tool call {name!r} arguments are not JSON") from None
            if not isinstance(arguments, dict):
                raise self.http.error(f"tool call {name!r} arguments are not a JSON object")
            call_id = call.get("id") or f"call_{index}"
            blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": arguments})
        return blocks
