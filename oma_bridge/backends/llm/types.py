"""The adapter protocol shared by every LLM provider, and its data.

An adapter speaks one provider's wire format.  It has two calls:

* ``await chat(request)`` → :class:`ChatResponse` (one non-streaming turn);
* ``stream(request)`` → an async generator of :class:`TextDelta`,
  :class:`ReasoningDelta` and :class:`ToolUseDelta` as they arrive, ending
  with exactly one :class:`TurnEnd` that carries the assembled response.

Both guard ``request.messages`` with :func:`~oma_bridge.messages.validate_messages`
at their entry (``stream`` on its first iteration), so an adapter used on its
own rejects malformed messages as OMA's adapters do.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

from oma_bridge.messages import ContentBlock, LLMMessage
from oma_bridge.results import TokenUsage
from oma_bridge.tools import ToolDefinition

__all__ = [
    "ChatRequest",
    "ChatResponse",
    "LLMAdapter",
    "ReasoningDelta",
    "StreamDelta",
    "TextDelta",
    "ToolSpec",
    "ToolUseDelta",
    "TurnBuilder",
    "TurnEnd",
]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What a model is told about a tool (the executor stays with the agent)."""

    name: str
    description: str
    input_schema: dict[str, Any]

    @classmethod
    def of(cls, tool: ToolDefinition) -> ToolSpec:
        return cls(tool.name, tool.description, tool.input_schema)


@dataclass(frozen=True)
class ChatRequest:
    """One model turn: the conversation so far and the knobs of the call."""

    model: str
    messages: Sequence[LLMMessage]
    system_prompt: str | None = None
    tools: Sequence[ToolSpec] = ()
    max_tokens: int | None = None
    temperature: float | None = None


@dataclass
class ChatResponse:
    """One assistant turn: its blocks in order, its usage and why it stopped."""

    content: list[ContentBlock] = field(default_factory=list)
    usage: TokenUsage = field(default_factory=TokenUsage)
    stop_reason: str | None = None

    @property
    def text(self) -> str:
        """The turn's text blocks, joined: the run's ``output`` when it is the last turn."""
        return "".join(b["text"] for b in self.content if b["type"] == "text")

    @property
    def tool_uses(self) -> list[dict[str, Any]]:
        return [dict(b) for b in self.content if b["type"] == "tool_use"]


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolUseDelta:
    """A complete ``tool_use`` block (its input arrives in pieces; it is sent whole)."""

    block: dict[str, Any]


@dataclass(frozen=True, slots=True)
class TurnEnd:
    response: ChatResponse


StreamDelta: TypeAlias = TextDelta | ReasoningDelta | ToolUseDelta | TurnEnd


class LLMAdapter(Protocol):
    """One provider's wire format over HTTP (or none, for ``echo``)."""

    provider: str

    async def chat(self, request: ChatRequest) -> ChatResponse: ...

    def stream(self, request: ChatRequest) -> AsyncGenerator[StreamDelta, None]: ...

    async def aclose(self) -> None: ...


class TurnBuilder:
    """Assembles a streamed turn's blocks in order, for the final :class:`TurnEnd`.

    Consecutive text (or reasoning) deltas merge into one block until
    :meth:`boundary` says a new provider block began.  Pieces are joined once,
    at the end: a 20,000-token answer must not be copied 20,000 times.
    """

    def __init__(self) -> None:
        self._entries: list[tuple[dict[str, Any], list[str] | None]] = []
        self.usage = TokenUsage()
        self.stop_reason: str | None = None
        self._open = False

    def boundary(self) -> None:
        self._open = False

    def text(self, text: str) -> None:
        self._append("text", text)

    def flush_text(self, pieces: list[str], out: list[StreamDelta]) -> None:
        """Text deltas of one network read: recorded and sent as one :class:`TextDelta`.

        Deltas that arrived together are shown together; nothing waits for
        more text.  A live stream (a token per read) still gives one ``text``
        event per token, while a burst (a fast local server, or a consumer
        that fell behind and let the socket fill up) costs one event per read
        instead of one per token.  The joined text is the same either way.
        """
        if pieces:
            text = "".join(pieces)
            self.text(text)
            out.append(TextDelta(text))
            pieces.clear()

    def reasoning(self, text: str, provider: str) -> dict[str, Any]:
        """Add reasoning text; the block is returned so a signature can join it."""
        block = self._append("reasoning", text)
        block.setdefault("provenance", provider)
        return block

    def block(self, block: dict[str, Any]) -> None:
        self._entries.append((block, None))
        self._open = False

    def _append(self, kind: str, text: str) -> dict[str, Any]:
        if self._open and self._entries:
            block, pieces = self._entries[-1]
            if pieces is not None and block["type"] == kind:
                pieces.append(text)
                return block
        block = {"type": kind}
        self._entries.append((block, [text]))
        self._open = True
        return block

    def response(self) -> ChatResponse:
        content: list[Any] = []
        for block, pieces in self._entries:
            if pieces is not None:
                block["text"] = "".join(pieces)
            content.append(block)
        return ChatResponse(content, self.usage, self.stop_reason)
