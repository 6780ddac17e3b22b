"""Messages: the types, the shape guard, the copy and the normalisers.

Messages are plain JSON data (dicts and lists), described by the TypedDicts
below.  Two functions stand between a caller's data and everything else:

* :func:`validate_messages` (and :func:`validate_content_blocks` for the
  ``prompt`` path) runs open-multi-agent's ``assertValidMessages`` checks with
  OMA's exact error strings, and oma_bridge's stricter checks on the
  internals of known block types (D1 in the reference).  A D1 violation is
  raised only once OMA's checks have passed the whole input, so an input OMA
  rejects keeps OMA's message.  Unknown block types pass unchanged.
* :func:`copy_messages` makes an independent deep copy of JSON data and
  refuses anything else (D2: "cloneable" means JSON data).

Neither recurses without bound, so hostile input (deep nesting, cycles,
huge strings) gets an :class:`~oma_bridge.errors.InvalidMessageError` naming
the path, never a ``RecursionError`` or a hang.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Sequence
from typing import Any, Literal, NotRequired, TypeAlias, TypedDict

from oma_bridge.errors import InvalidMessageError

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


_ARRAY = (list, tuple)

#: What ``dict.get`` answers for a missing key where the ``<t>`` of an error
#: message must read ``undefined`` (JavaScript's value of a missing property).
_MISSING: Any = object()


def _type_name(value: object) -> str:
    """The ``<t>`` of OMA's messages: ``null``, ``array`` or JavaScript's typeof."""
    if value is _MISSING:
        return "undefined"
    if value is None:
        return "null"
    if isinstance(value, _ARRAY):
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


def _string_or_none(value: object) -> str | None:
    """A ``type`` tag to compare: a non-string's own ``__eq__`` is never run."""
    return value if isinstance(value, str) else None


def _invalid(path: str, problem: str) -> InvalidMessageError:
    return InvalidMessageError(f"{path} {problem}", path=path)


# --------------------------------------------------------------------------
# The canonical base64 test

_B64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_B64_VALUE = {c: i for i, c in enumerate(_B64_ALPHABET.decode())}
#: Characters per step of the alphabet check.  Buffers this small come back
#: from malloc's free lists; one buffer the size of a megabyte payload would be
#: fresh pages, faulted in on every call (measured: about as costly as the
#: check itself once other allocations run in between, as they do in a copy).
_B64_CHUNK = 1 << 16


def is_canonical_base64(data: str) -> bool:
    """OMA's canonical base64 test, without decoding the payload.

    Equivalent to: the text matches ``^[A-Za-z0-9+/]*={0,2}$``, its length
    mod 4 is not 1, it is non-empty without its trailing ``=``, and it
    re-encodes to itself after decoding (compared without trailing ``=``).
    Decoding then re-encoding changes the text only when the last quantum is
    short by one character or carries non-zero spare bits, so those two
    facts are checked directly on the last character.

    This runs on every image of every input: the alphabet check is a C-speed
    ``bytes.translate`` that deletes the alphabet (whatever survives is a
    stray character), over ASCII copies of bounded chunks.
    """
    if len(data) % 4 == 1 or not data.isascii():
        return False
    pad = 2 if data.endswith("==") else 1 if data.endswith("=") else 0
    body_length = len(data) - pad
    if body_length == 0 or body_length % 4 == 1:
        return False
    for start in range(0, body_length, _B64_CHUNK):
        chunk = data[start : min(start + _B64_CHUNK, body_length)]
        if chunk.encode("ascii").translate(None, _B64_ALPHABET):
            return False  # outside the alphabet, or an '=' before the padding
    last = _B64_VALUE[data[body_length - 1]]
    remainder = body_length % 4
    if remainder == 2:
        return last & 0x0F == 0
    if remainder == 3:
        return last & 0x03 == 0
    return True


#: Large payloads found canonical, remembered so that the same image is not
#: scanned again on every turn (a history is guarded at each run, and again at
#: each provider call of a tool loop).  Keyed by the string itself: a lookup
#: costs one hash (cached by CPython in the string) and, for the very object
#: seen before, an identity check.  Bounded by total size, oldest out first.
_REMEMBER_FROM = 64 * 1024
_REMEMBER_AT_MOST = 16 * 1024 * 1024
_remembered: dict[str, None] = {}
_remembered_size = 0


def _canonical_base64_remembered(data: str) -> bool:
    global _remembered_size
    if len(data) < _REMEMBER_FROM:
        return is_canonical_base64(data)
    if data in _remembered:
        return True
    if not is_canonical_base64(data):
        return False
    if len(data) <= _REMEMBER_AT_MOST:
        _remembered[data] = None
        _remembered_size += len(data)
        while _remembered_size > _REMEMBER_AT_MOST:
            oldest = next(iter(_remembered))
            del _remembered[oldest]
            _remembered_size -= len(oldest)
    return True


# --------------------------------------------------------------------------
# The checks of tool results and media sources: open-multi-agent's, verbatim

_MIME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*$")


def _check_source(source: object, path: str, *, allow_url: bool) -> None:
    if not isinstance(source, dict):
        raise _invalid(path, "must be a media source object")
    media_type = source.get("media_type")
    if not isinstance(media_type, str) or not media_type:
        raise _invalid(f"{path}.media_type", "must be a non-empty string")
    if not _MIME.match(media_type):
        raise _invalid(f"{path}.media_type", "must be a MIME type without parameters")
    kind = _string_or_none(source.get("type"))
    if kind == "base64":
        data = source.get("data")
        if not isinstance(data, str) or not data:
            raise _invalid(f"{path}.data", "must be a non-empty string")
        if not _canonical_base64_remembered(data):
            raise _invalid(f"{path}.data", "must contain raw base64 data")
    elif kind == "url" and allow_url:
        _check_url(source.get("url"), f"{path}.url")
    elif allow_url:
        raise _invalid(f"{path}.type", 'must be "base64" or "url"')
    else:
        raise _invalid(f"{path}.type", 'must be "base64"')


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*$")
#: Characters a WHATWG URL parser refuses in a host (besides C0 controls).
_FORBIDDEN_HOST = frozenset(" #%/:<>?@[\\]^|")


def _check_url(url: object, path: str) -> None:
    """OMA's URL checks, parsed as JavaScript's ``new URL`` (WHATWG) parses them.

    For http(s), slashes after the scheme are optional (``http:example.com``
    is absolute), a backslash counts as a slash, and a host with a space or
    a port above 65535 does not parse.
    """
    if not isinstance(url, str) or not url:
        raise _invalid(path, "must be a non-empty string")
    text = url.strip("".join(map(chr, range(0x21)))).translate(_TAB_AND_NEWLINE)
    scheme, colon, rest = text.partition(":")
    if not colon or not _SCHEME.match(scheme):
        raise _invalid(path, "must be an absolute HTTP(S) URL")
    if scheme.lower() not in ("http", "https"):
        raise _invalid(path, "must use HTTP or HTTPS")
    if not _http_authority_parses(rest):
        raise _invalid(path, "must be an absolute HTTP(S) URL")


_TAB_AND_NEWLINE = {ord("\t"): None, ord("\n"): None, ord("\r"): None}


def _http_authority_parses(rest: str) -> bool:
    authority = re.split(r"[/?#]", rest.replace("\\", "/").lstrip("/"), maxsplit=1)[0]
    host_port = authority.rpartition("@")[2]
    if host_port.startswith("["):  # an IPv6 literal
        host, bracket, port = host_port[1:].partition("]")
        if not bracket or not host or (port and not port.startswith(":")):
            return False
        port = port[1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return False
    else:
        host, _, port = host_port.partition(":")
        if not host or any(c in _FORBIDDEN_HOST or ord(c) < 0x20 for c in host):
            return False
    return not port or (port.isdigit() and port.isascii() and int(port) <= 65535)


def _check_tool_result_content(content: object, path: str) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, _ARRAY):
        raise _invalid(
            path, f"must be a string or a non-empty content-part array, got {_type_name(content)}"
        )
    if not content:
        raise _invalid(path, "must not be an empty content-part array")
    for k, part in enumerate(content):
        part_path = f"{path}[{k}]"
        if not isinstance(part, dict):
            raise _invalid(part_path, "must be a content-part object")
        kind = _string_or_none(part.get("type"))
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
    content = block.get("content", _MISSING)
    _check_tool_result_content(content, f"{path}.content")
    if is_error is True and not isinstance(content, str):
        raise _invalid(f"{path}.content", "must be a string for an error tool result")


# --------------------------------------------------------------------------
# The guard, one pass: OMA's checks raise at once; oma_bridge's stricter checks
# on known block internals (D1) are only remembered, and the first of them is
# raised after OMA's checks have passed the whole input.  So an input OMA
# rejects keeps OMA's exact message, as with two passes, for the price of one.


def validate_messages(messages: object) -> None:
    """Raise :class:`InvalidMessageError` unless ``messages`` is a valid ``LLMMessage[]``.

    Stops at the first violation; the message names its path, as
    ``messages[0].content[1].source.data must contain raw base64 data``.
    Lists and tuples both count as arrays.
    """
    if not isinstance(messages, _ARRAY):
        raise _invalid("messages", f"must be an array, got {_type_name(messages)}")
    strict: InvalidMessageError | None = None  # the first D1 violation
    # This loop runs on every block of every input and history, so a text
    # block costs no index and no string work; see _block_path.
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _invalid(f"messages[{i}]", f"must be an object, got {_type_name(message)}")
        content = message.get("content", _MISSING)
        if not isinstance(content, _ARRAY):
            raise _invalid(
                f"messages[{i}].content", f"must be a ContentBlock[], got {_type_name(content)}"
            )
        if strict is None:
            role = message.get("role")
            if not isinstance(role, str) or (role != "user" and role != "assistant"):
                strict = _invalid(f"messages[{i}].role", 'must be "user" or "assistant"')
        for block in content:
            kind = block.get("type") if isinstance(block, dict) else None
            if not isinstance(kind, str):
                raise _invalid(
                    _block_path(i, content, block), 'must be a content block with a string "type"'
                )
            if kind == "tool_result":
                _check_tool_result(block, _block_path(i, content, block))
            elif strict is not None:
                continue
            elif kind == "text" or kind == "reasoning":
                if not isinstance(block.get("text"), str):
                    strict = _invalid(_block_path(i, content, block) + ".text", "must be a string")
            elif kind == "image" or kind == "tool_use":
                strict = _strict_error(block, _block_path(i, content, block))
    if strict is not None:
        raise strict


def _block_path(i: int, content: Sequence[object], block: object) -> str:
    """``messages[i].content[j]`` for ``block``, its index found by identity.

    The guard's loop keeps no block index.  If one object sits twice in
    ``content``, the first place is the right one: the checks answer alike
    for both, so a failure is met there first.
    """
    j = next(j for j, item in enumerate(content) if item is block)
    return f"messages[{i}].content[{j}]"


def _strict_error(block: dict[str, Any], path: str) -> InvalidMessageError | None:
    """The D1 violation of an ``image`` or ``tool_use`` block, if any."""
    try:
        if block["type"] == "image":
            _check_source(block.get("source"), f"{path}.source", allow_url=False)
            return None
        for key in ("id", "name"):
            if not isinstance(block.get(key), str):
                raise _invalid(f"{path}.{key}", "must be a string")
        tool_input = block.get("input", _MISSING)
        if not isinstance(tool_input, dict):
            raise _invalid(f"{path}.input", f"must be an object, got {_type_name(tool_input)}")
    except InvalidMessageError as error:
        return error
    return None


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

#: Most containers one copy may create.  Shared sub-lists (``x = [x, x]``, n
#: times over) expand into 2**n containers in a JSON tree; without a bound
#: such an input would hang the copy, or later its encoding.
MAX_CONTAINERS = 1_000_000

_TOO_MANY = f"holds more than {MAX_CONTAINERS:,} objects and arrays once expanded"
_CLONEABLE = (
    "messages must contain cloneable structured data (strings, arrays, and plain data objects)"
)


class _Refusal(Exception):
    """Raised inside the copy; each level on the way up adds its path segment."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        self.segments: list[object] = []


#: Values the copy shares instead of copying: immutable, and exactly JSON.
_ATOMS = frozenset({str, int, bool, type(None)})


def _copy_value(value: Any, depth: int, budget: list[int]) -> Any:
    # The hot path of every input and history: a container is copied in C
    # (dict.copy, list) and only its non-atomic items are visited again.
    kind = type(value)
    if kind is dict:
        if depth >= MAX_NESTING_DEPTH:
            raise _Refusal(f"nests deeper than {MAX_NESTING_DEPTH} levels")
        budget[0] -= 1
        if budget[0] < 0:
            raise _Refusal(_TOO_MANY)
        out = value.copy()
        for key, item in value.items():
            if type(key) is not str:
                raise _Refusal(f"has a non-string key of type {type(key).__name__}")
            if type(item) not in _ATOMS:
                try:
                    out[key] = _copy_value(item, depth + 1, budget)
                except _Refusal as refusal:
                    refusal.segments.append(key)
                    raise
        return out
    if kind is list or kind is tuple:
        if depth >= MAX_NESTING_DEPTH:
            raise _Refusal(f"nests deeper than {MAX_NESTING_DEPTH} levels")
        budget[0] -= 1
        if budget[0] < 0:
            raise _Refusal(_TOO_MANY)
        copied = list(value)
        index = 0  # cheaper than enumerate's tuple per item
        for item in value:
            if type(item) not in _ATOMS:
                try:
                    copied[index] = _copy_value(item, depth + 1, budget)
                except _Refusal as refusal:
                    refusal.segments.append(index)
                    raise
            index += 1  # noqa: SIM113  (see above)
        return copied
    if kind in _ATOMS:
        return value
    if kind is float:
        if math.isfinite(value):
            return value
        raise _Refusal(f"is a non-finite number ({value})")
    return _copy_subclass(value, depth, budget)


def _copy_subclass(value: Any, depth: int, budget: list[int]) -> Any:
    """The slow path: subclasses of JSON types become the plain type."""
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _copy_value(float(value), depth, budget)
    if isinstance(value, dict):
        return _copy_value(dict(value), depth, budget)
    if isinstance(value, _ARRAY):
        return _copy_value(list(value), depth, budget)
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
        copied = _copy_value(messages, 0, [MAX_CONTAINERS])
    except _Refusal as refusal:
        segments = refusal.segments[::-1]
        problem = refusal.problem
        if problem.startswith("nests deeper"):
            cycle_end = _cycle_end(messages, segments)
            if cycle_end is not None:
                segments, problem = segments[:cycle_end], "is a reference cycle"
        elif problem is _TOO_MANY:
            segments = []  # the whole input is too large, not the place where counting stopped
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
    """A ``ContentBlock[]`` for ``prompt``, guarded and copied, as one user message.

    The list is wrapped before the copy as before the guard, so a copy refusal
    names the same path as a guard error would (``messages[0].content[1]...``).
    """
    messages = [{"role": "user", "content": blocks}]
    validate_messages(messages)
    return copy_messages(messages)


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
