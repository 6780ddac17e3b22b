"""Messages: the types, the shape guard, the copy and the normalisers.

Messages are plain JSON data (dicts and lists), described by the TypedDicts
below.  Two functions stand between a caller's data and everything else:

* :func:`validate_messages` (and :func:`validate_content_blocks` for the
  ``prompt`` path) runs open-multi-agent's ``assertValidMessages`` checks with
  OMA's exact error strings, then a second pass of oma_bridge's stricter
  checks on the internals of known block types (D1 in the reference).  The
  second pass comes after the first over the whole input, so an input OMA
  rejects keeps OMA's message.  Unknown block types pass unchanged.
* :func:`copy_messages` makes an independent deep copy of JSON data and
  refuses anything else (D2: "cloneable" means JSON data).

Neither recurses without bound, so hostile input (deep nesting, cycles,
huge strings) gets an :class:`~oma_bridge.errors.InvalidMessageError` naming
the path, never a ``RecursionError`` or a hang.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, Literal, NotRequired, TypeAlias, TypedDict
from urllib.parse import urlsplit

from .errors import InvalidMessageError

__all__ = [
    "MAX_NESTING_DEPTH",
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
    "copy_messages",
    "is_canonical_base64",
    "last_user_text",
    "prompt_to_messages",
    "text_message",
    "validate_content_blocks",
    "validate_messages",
]

# --------------------------------------------------------------------------
# Types


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


AgentRunInput: TypeAlias = str | Sequence[LLMMessage]
AgentPromptInput: TypeAlias = str | Sequence[ContentBlock]

# --------------------------------------------------------------------------
# Helpers shared by the guard and the copy


def _type_name(value: object) -> str:
    """The ``<t>`` of OMA's messages: ``null``, ``array`` or JavaScript's typeof."""
    if value is None:
        return "null"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if callable(value) and not isinstance(value, type):
        return "function"
    return "object"


_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")


def _key_segment(key: object) -> str:
    if isinstance(key, str) and _IDENTIFIER.match(key):
        return "." + key
    if isinstance(key, int):
        return f"[{key}]"
    return "[" + _json_quote(str(key)) + "]"


def _json_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _invalid(path: str, problem: str) -> InvalidMessageError:
    return InvalidMessageError(f"{path} {problem}", path=path)


# --------------------------------------------------------------------------
# The canonical base64 test

_B64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_B64_VALUE = {c: i for i, c in enumerate(_B64_ALPHABET.decode())}
_PASSTHROUGH = bytes(range(256))


def is_canonical_base64(data: str) -> bool:
    """OMA's canonical base64 test, without decoding the payload.

    Equivalent to: the text matches ``^[A-Za-z0-9+/]*={0,2}$``, its length
    mod 4 is not 1, it is non-empty without its trailing ``=``, and it
    re-encodes to itself after decoding (compared without trailing ``=``).
    Decoding then re-encoding changes the text only when the last quantum is
    short by one character or carries non-zero spare bits, so those two
    facts are checked directly on the last character: linear in the size with
    C-speed scans, and no allocation of the decoded payload beyond one
    ASCII view.
    """
    if len(data) % 4 == 1 or not data.isascii():
        return False
    body = data.rstrip("=")
    if not body or len(data) - len(body) > 2:
        return False
    if body.encode("ascii").translate(_PASSTHROUGH, _B64_ALPHABET):
        return False  # a character outside the alphabet ('=' inside included)
    remainder = len(body) % 4
    if remainder == 1:
        return False
    last = _B64_VALUE[body[-1]]
    if remainder == 2:
        return last & 0x0F == 0
    if remainder == 3:
        return last & 0x03 == 0
    return True


# --------------------------------------------------------------------------
# The guard, pass 1: open-multi-agent's checks, verbatim

_MIME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*$")


def _check_source(source: object, path: str, *, allow_url: bool) -> None:
    if not isinstance(source, dict):
        raise _invalid(path, "must be a media source object")
    media_type = source.get("media_type")
    if not isinstance(media_type, str) or not media_type:
        raise _invalid(f"{path}.media_type", "must be a non-empty string")
    if not _MIME.match(media_type):
        raise _invalid(f"{path}.media_type", "must be a MIME type without parameters")
    kind = source.get("type")
    if kind == "base64":
        data = source.get("data")
        if not isinstance(data, str) or not data:
            raise _invalid(f"{path}.data", "must be a non-empty string")
        if not is_canonical_base64(data):
            raise _invalid(f"{path}.data", "must contain raw base64 data")
    elif kind == "url" and allow_url:
        _check_url(source.get("url"), f"{path}.url")
    elif allow_url:
        raise _invalid(f"{path}.type", 'must be "base64" or "url"')
    else:
        raise _invalid(f"{path}.type", 'must be "base64"')


def _check_url(url: object, path: str) -> None:
    if not isinstance(url, str) or not url:
        raise _invalid(path, "must be a non-empty string")
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        raise _invalid(path, "must be an absolute HTTP(S) URL") from None
    scheme = parts.scheme.lower()
    if not scheme:
        raise _invalid(path, "must be an absolute HTTP(S) URL")
    if scheme not in ("http", "https"):
        raise _invalid(path, "must use HTTP or HTTPS")
    if not parts.hostname:
        raise _invalid(path, "must be an absolute HTTP(S) URL")


def _check_tool_result_content(content: object, path: str) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, list | tuple):
        raise _invalid(
            path, f"must be a string or a non-empty content-part array, got {_type_name(content)}"
        )
    if not content:
        raise _invalid(path, "must not be an empty content-part array")
    for k, part in enumerate(content):
        part_path = f"{path}[{k}]"
        if not isinstance(part, dict):
            raise _invalid(part_path, "must be a content-part object")
        kind = part.get("type")
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise _invalid(f"{part_path}.text", "must be a string")
        elif kind == "image":
            _check_source(part.get("source"), f"{part_path}.source", allow_url=True)
        elif kind == "file":
            filename = part.get("filename")
            if not isinstance(filename, str) or not filename.strip():
                raise _invalid(f"{part_path}.filename", "must be a non-empty string")
            _check_source(part.get("source"), f"{part_path}.source", allow_url=True)
        else:
            raise _invalid(f"{part_path}.type", 'must be "text", "image", or "file"')


def _check_tool_result(block: dict[str, Any], path: str) -> None:
    if not isinstance(block.get("tool_use_id"), str):
        raise _invalid(f"{path}.tool_use_id", "must be a string")
    is_error = block.get("is_error")
    if "is_error" in block and not isinstance(is_error, bool):
        raise _invalid(f"{path}.is_error", "must be a boolean when provided")
    content = block.get("content")
    _check_tool_result_content(content, f"{path}.content")
    if is_error is True and not isinstance(content, str):
        raise _invalid(f"{path}.content", "must be a string for an error tool result")


def _oma_pass(messages: object) -> None:
    if not isinstance(messages, list | tuple):
        raise _invalid("messages", f"must be an array, got {_type_name(messages)}")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _invalid(f"messages[{i}]", f"must be an object, got {_type_name(message)}")
        content = message.get("content")
        if not isinstance(content, list | tuple):
            raise _invalid(
                f"messages[{i}].content", f"must be a ContentBlock[], got {_type_name(content)}"
            )
        for j, block in enumerate(content):
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise _invalid(
                    f"messages[{i}].content[{j}]", 'must be a content block with a string "type"'
                )
            if block["type"] == "tool_result":
                _check_tool_result(block, f"messages[{i}].content[{j}]")


# --------------------------------------------------------------------------
# The guard, pass 2: oma_bridge's checks on known block internals (D1)


def _strict_pass(messages: Sequence[dict[str, Any]]) -> None:
    # Paths are built only on failure: this loop runs on every block of every
    # input and history, so it avoids per-block string work.
    for i, message in enumerate(messages):
        role = message.get("role")
        if role != "user" and role != "assistant":
            raise _invalid(f"messages[{i}].role", 'must be "user" or "assistant"')
        for j, block in enumerate(message["content"]):
            kind = block["type"]
            if kind == "text" or kind == "reasoning":
                if type(block.get("text")) is not str and not isinstance(block.get("text"), str):
                    raise _invalid(f"messages[{i}].content[{j}].text", "must be a string")
            elif kind == "image":
                _check_source(
                    block.get("source"), f"messages[{i}].content[{j}].source", allow_url=False
                )
            elif kind == "tool_use":
                _check_tool_use(block, i, j)


def _check_tool_use(block: dict[str, Any], i: int, j: int) -> None:
    for key in ("id", "name"):
        if not isinstance(block.get(key), str):
            raise _invalid(f"messages[{i}].content[{j}].{key}", "must be a string")
    tool_input = block.get("input")
    if not isinstance(tool_input, dict):
        raise _invalid(
            f"messages[{i}].content[{j}].input", f"must be an object, got {_type_name(tool_input)}"
        )


def validate_messages(messages: object) -> None:
    """Raise :class:`InvalidMessageError` unless ``messages`` is a valid ``LLMMessage[]``.

    Stops at the first violation; the message names its path, as
    ``messages[0].content[1].source.data must contain raw base64 data``.
    Lists and tuples both count as arrays.
    """
    _oma_pass(messages)
    _strict_pass(messages)  # type: ignore[arg-type]  # pass 1 proved the shape


def validate_content_blocks(blocks: object) -> None:
    """Guard a ``ContentBlock[]`` given to ``prompt``.

    As in OMA, the list is wrapped as one user message first, so errors read
    ``messages[0].content...`` (``prompt(None)`` gives
    ``messages[0].content must be a ContentBlock[], got null``).
    """
    validate_messages([{"role": "user", "content": blocks}])


# --------------------------------------------------------------------------
# The copy

#: Deepest JSON nesting accepted, counted from the message list itself.  orjson
#: (which every edge of oma_bridge uses) refuses to encode past 255 levels, and
#: a wire frame or provider request adds a few levels around the messages, so
#: deeper input could be accepted here only to fail later, far from its cause.
MAX_NESTING_DEPTH = 200

_CLONEABLE = (
    "messages must contain cloneable structured data (strings, arrays, and plain data objects)"
)


class _Refusal(Exception):
    """Raised inside the copy; each level on the way up adds its path segment."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        self.segments: list[object] = []


def _copy_value(value: Any, depth: int) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is dict:
        if depth >= MAX_NESTING_DEPTH:
            raise _Refusal(f"nests deeper than {MAX_NESTING_DEPTH} levels")
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _Refusal(f"has a non-string key of type {type(key).__name__}")
            try:
                out[key] = _copy_value(item, depth + 1)
            except _Refusal as refusal:
                refusal.segments.append(key)
                raise
        return out
    if kind is list or kind is tuple:
        if depth >= MAX_NESTING_DEPTH:
            raise _Refusal(f"nests deeper than {MAX_NESTING_DEPTH} levels")
        copied = []
        for index, item in enumerate(value):
            try:
                copied.append(_copy_value(item, depth + 1))
            except _Refusal as refusal:
                refusal.segments.append(index)
                raise
        return copied
    if kind is float:
        if math.isfinite(value):
            return value
        raise _Refusal(f"is a non-finite number ({value})")
    return _copy_subclass(value, depth)


def _copy_subclass(value: Any, depth: int) -> Any:
    """The slow path: subclasses of JSON types become the plain type."""
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _copy_value(float(value), depth)
    if isinstance(value, dict):
        return _copy_value(dict(value), depth)
    if isinstance(value, list | tuple):
        return _copy_value(list(value), depth)
    raise _Refusal(f"is not JSON data ({_describe(value)})")


def _describe(value: object) -> str:
    if callable(value) and not isinstance(value, type):
        return "a function"
    return f"a value of type {type(value).__name__}"


def _path_of(segments: Sequence[object]) -> str:
    """The path of a copy refusal; a deep one keeps its head and its depth."""
    if len(segments) <= 16:
        return "messages" + "".join(_key_segment(s) for s in segments)
    head = "".join(_key_segment(s) for s in segments[:12])
    return f"messages{head}...(+{len(segments) - 12} levels)"


def _cycle_end(root: object, segments: Sequence[object]) -> int | None:
    """How many segments lead from ``root`` to a container met twice, if any."""
    seen = {id(root)}
    node: Any = root
    for count, segment in enumerate(segments, 1):
        try:
            node = node[segment]
        except (KeyError, IndexError, TypeError):
            return None
        if id(node) in seen:
            return count
        seen.add(id(node))
    return None


def copy_messages(messages: Sequence[Any]) -> list[Any]:
    """Return an independent deep copy of JSON data; refuse anything else.

    Dicts with ``str`` keys, lists (tuples become lists), strings, ints,
    finite floats, bools and ``None`` are copied; strings are immutable and
    shared.  Anything else (a function, a set, bytes, NaN, a non-string key,
    a reference cycle, nesting past :data:`MAX_NESTING_DEPTH`) raises
    :class:`InvalidMessageError` in OMA's "cloneable" wording followed by the
    path and the reason.
    """
    try:
        copied = _copy_value(messages, 0)
    except _Refusal as refusal:
        segments = refusal.segments[::-1]
        problem = refusal.problem
        if problem.startswith("nests deeper"):
            cycle_end = _cycle_end(messages, segments)
            if cycle_end is not None:
                segments, problem = segments[:cycle_end], "is a reference cycle"
        path = _path_of(segments)
        raise InvalidMessageError(f"{_CLONEABLE}: {path} {problem}", path=path) from None
    if not isinstance(copied, list):
        raise InvalidMessageError(f"{_CLONEABLE}: messages is not an array", path="messages")
    return copied


# --------------------------------------------------------------------------
# Normalisers and prompt text


def text_message(text: str, role: Literal["user", "assistant"] = "user") -> LLMMessage:
    """One message holding one text block: how a string input enters a run."""
    return {"role": role, "content": [{"type": "text", "text": text}]}


def prompt_to_messages(blocks: Sequence[Any]) -> list[LLMMessage]:
    """A ``ContentBlock[]`` for ``prompt``, guarded and copied, as one user message."""
    validate_content_blocks(blocks)
    return [{"role": "user", "content": copy_messages(blocks)}]


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
