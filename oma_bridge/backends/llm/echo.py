"""The ``echo`` provider: offline, deterministic, no key (docs/contract.md §10, §11.31).

It answers with what reached it: the blocks of the last user message in
order (text as itself, an image as ``[image:<media_type>]``, any other block
as ``[<type>]``) joined by one space, after ``(system: <prompt>) `` when
there is a system prompt.  Demos and tests see exactly what a model would
have been sent.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import anyio.lowlevel

from oma_bridge.backends.llm.types import ChatRequest, ChatResponse, StreamDelta, TextDelta, TurnEnd
from oma_bridge.messages import LLMMessage, validate_messages
from oma_bridge.results import TokenUsage

__all__ = ["EchoAdapter", "echo_answer"]

#: A word with the whitespace after it (leading whitespace rides with the
#: first word), so the streamed pieces join back into the answer exactly.
_WORD_WITH_SPACE = re.compile(r"\s*\S+\s*")


def _render(block: Any) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "image":
        return f"[image:{block['source']['media_type']}]"
    return f"[{kind}]"


def _words(text: str) -> int:
    return len(text.split())


def echo_answer(messages: Sequence[LLMMessage], system_prompt: str | None) -> ChatResponse:
    """The echo provider's answer to ``messages`` (already validated)."""
    last_user = next((m for m in reversed(messages) if m["role"] == "user"), None)
    answer = " ".join(_render(b) for b in last_user["content"]) if last_user else ""
    if system_prompt:
        answer = f"(system: {system_prompt}) {answer}"
    read = _words(system_prompt or "") + sum(
        _words(b["text"]) for m in messages for b in m["content"] if b["type"] == "text"
    )
    usage = TokenUsage(input_tokens=read, output_tokens=_words(answer))
    return ChatResponse([{"type": "text", "text": answer}], usage, "end_turn")


class EchoAdapter:
    """The :class:`~oma_bridge.backends.llm.types.LLMAdapter` of the ``echo`` provider."""

    provider = "echo"

    async def chat(self, request: ChatRequest) -> ChatResponse:
        validate_messages(request.messages)
        return echo_answer(request.messages, request.system_prompt)

    async def stream(self, request: ChatRequest) -> AsyncGenerator[StreamDelta, None]:
        """One :class:`TextDelta` per word, with its trailing space.

        Each word is a scheduling point, as a model's token is one network
        read: a stream of the offline provider shares the event loop as a
        real provider's does, instead of holding it until its client's socket
        is full.
        """
        validate_messages(request.messages)
        response = echo_answer(request.messages, request.system_prompt)
        for match in _WORD_WITH_SPACE.finditer(response.text):
            await anyio.lowlevel.checkpoint()
            yield TextDelta(match.group())
        yield TurnEnd(response)

    async def aclose(self) -> None:
        return None
