"""The message types: plain JSON data (dicts and lists) described by TypedDicts.

They are ``typing_extensions.TypedDict`` so that pydantic can read them (on
Python 3.11 it refuses ``typing.TypedDict``): the wire schema builds on these
same classes instead of a mirror.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NotRequired, TypeAlias

from typing_extensions import TypedDict

__all__ = [
    "AgentPromptInput",
    "AgentRunInput",
    "Base64Source",
    "ContentBlock",
    "ImageBlock",
    "LLMMessage",
    "ReasoningBlock",
    "TextBlock",
    "ToolResultBlock",
    "ToolResultFilePart",
    "ToolResultImagePart",
    "ToolResultPart",
    "ToolResultTextPart",
    "ToolUseBlock",
    "UrlSource",
    "last_user_text",
    "text_message",
]


class Base64Source(TypedDict):
    type: Literal["base64"]
    media_type: str
    data: str


class UrlSource(TypedDict):
    type: Literal["url"]
    media_type: str
    url: str


class TextBlock(TypedDict):
    type: Literal["text"]
    text: str


class ImageBlock(TypedDict):
    type: Literal["image"]
    source: Base64Source


class ToolUseBlock(TypedDict):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]
    signature: NotRequired[str]


class ToolResultTextPart(TypedDict):
    type: Literal["text"]
    text: str


class ToolResultImagePart(TypedDict):
    type: Literal["image"]
    source: Base64Source | UrlSource


class ToolResultFilePart(TypedDict):
    type: Literal["file"]
    filename: str
    source: Base64Source | UrlSource


ToolResultPart: TypeAlias = ToolResultTextPart | ToolResultImagePart | ToolResultFilePart


class ToolResultBlock(TypedDict):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[ToolResultPart]
    is_error: NotRequired[bool]


class ReasoningBlock(TypedDict):
    type: Literal["reasoning"]
    text: str
    signature: NotRequired[str]
    redactedData: NotRequired[str]
    provenance: NotRequired[str]


ContentBlock: TypeAlias = TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ReasoningBlock


class LLMMessage(TypedDict):
    role: Literal["user", "assistant"]
    content: list[ContentBlock]


# How pydantic (the wire schema) reads these shapes, set without importing it:
# a source is closed; blocks and messages keep unknown keys, because the guard
# passes them through and the daemon hands client data back unchanged.
_closed: Any
for _closed in (Base64Source, UrlSource):
    _closed.__pydantic_config__ = {"extra": "forbid"}
_open: Any
for _open in (
    TextBlock,
    ImageBlock,
    ToolUseBlock,
    ToolResultTextPart,
    ToolResultImagePart,
    ToolResultFilePart,
    ToolResultBlock,
    ReasoningBlock,
    LLMMessage,
):
    _open.__pydantic_config__ = {"extra": "allow"}

AgentRunInput: TypeAlias = str | Sequence[LLMMessage]
AgentPromptInput: TypeAlias = str | Sequence[ContentBlock]


# --------------------------------------------------------------------------
# Constructors and prompt text


def text_message(text: str, role: Literal["user", "assistant"] = "user") -> LLMMessage:
    """One message holding one text block: how a string input enters a run."""
    return {"role": role, "content": [{"type": "text", "text": text}]}


def last_user_text(messages: Sequence[LLMMessage], joiner: str) -> str:
    """The text blocks of the last user message, joined by ``joiner``.

    The hook context uses ``joiner=""`` untrimmed; external backends use
    ``"\\n"`` and trim.  With no user message the text is ``""``.
    """
    for message in reversed(messages):
        if message.get("role") == "user":
            return joiner.join(
                block["text"]
                for block in message.get("content", ())
                if block.get("type") == "text" and isinstance(block.get("text"), str)
            )
    return ""
