"""The shape guard: open-multi-agent's message checks, and oma_bridge's stricter ones.

:func:`validate_messages` (and :func:`validate_content_blocks` for the
``prompt`` path) runs open-multi-agent's ``assertValidMessages`` checks with
its exact error strings, then oma_bridge's checks on the internals of known
block types (``docs/decisions.md``, D1).  A D1 violation is raised only
once the reference's checks have passed the whole input, so an input the
reference rejects keeps the reference's message.  Unknown block types pass
unchanged.  Nothing here recurses without bound: hostile input gets an
:class:`~oma_bridge.errors.InvalidMessageError` naming the path.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Any

from oma_bridge.errors import InvalidMessageError

__all__ = ["is_canonical_base64", "validate_content_blocks", "validate_messages"]

# Helpers


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
#: each provider call of a tool loop, and the copies of a history share its
#: strings).  Remembered by identity: a lookup is one ``id`` and one ``is``,
#: and a first sight costs no hash of the payload (SipHash over a megabyte
#: costs about 60% of the scan itself).  The memo holds each string it names,
#: so an id cannot be reused while it is remembered.  An equal but distinct
#: string (the same image decoded again from a new frame) is scanned again.
#: Bounded by total size, oldest out first.
_REMEMBER_FROM = 64 * 1024
_REMEMBER_AT_MOST = 16 * 1024 * 1024
_remembered_size = 0


class _Remembered:
    """The validated payloads, by identity: ``data in _remembered`` asks about that very string."""

    __slots__ = ("by_id",)

    def __init__(self) -> None:
        self.by_id: dict[int, str] = {}

    def __contains__(self, data: object) -> bool:
        return self.by_id.get(id(data)) is data


_remembered = _Remembered()


def _canonical_base64_remembered(data: str) -> bool:
    global _remembered_size
    if len(data) < _REMEMBER_FROM:
        return is_canonical_base64(data)
    by_id = _remembered.by_id
    if by_id.get(id(data)) is data:
        return True
    if not is_canonical_base64(data):
        return False
    if len(data) <= _REMEMBER_AT_MOST:
        by_id[id(data)] = data
        _remembered_size += len(data)
        while _remembered_size > _REMEMBER_AT_MOST:
            oldest = by_id.pop(next(iter(by_id)))
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
# on known block internals (docs/decisions.md, D1) are only remembered, and the first of them is
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
    strict: InvalidMessageError | None = None  # the first D1 violation (docs/decisions.md)
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
