"""Property tests of the guard, the copy and the canonical base64 test.

* Every generated valid conversation passes the guard.
* Its copy equals it and shares no dict or list with it: mutating every
  nested dict and list of the original leaves the copy as it was.
* One corruption of a valid conversation is refused with a path that points
  at the corrupted place (by the guard, or by the copy for non-JSON data).
* ``is_canonical_base64`` agrees with a literal implementation of OMA's rule.
"""

from __future__ import annotations

import base64
import binascii
import copy
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oma_bridge.errors import InvalidMessageError
from oma_bridge.messages import copy_messages, is_canonical_base64, validate_messages

# -- strategies -------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=6), json_values, max_size=4)

_MIME_CHARS = "abcxyzABC019!#$&^_.+-"
mime_types = st.sampled_from(
    ["image/png", "image/jpeg", "application/pdf", "text/plain"]
) | st.builds(
    lambda a, b, c, d: f"{a}{b}/{c}{d}",
    st.sampled_from("aZ0"),
    st.text(_MIME_CHARS, max_size=5),
    st.sampled_from("bY9"),
    st.text(_MIME_CHARS, max_size=5),
)


@st.composite
def base64_data(draw: st.DrawFn) -> str:
    """Canonical base64 of 1-40 bytes, its padding kept, cut or partly cut."""
    encoded = base64.b64encode(draw(st.binary(min_size=1, max_size=40))).decode("ascii")
    body = encoded.rstrip("=")
    return body + "=" * draw(st.integers(0, len(encoded) - len(body)))


urls = st.builds(
    lambda scheme, host, path: f"{scheme}://{host}/{path}",
    st.sampled_from(["http", "https", "HTTPS"]),
    st.sampled_from(["example.com", "127.0.0.1:8080", "[::1]", "a.b.c"]),
    st.text("abc/._-", max_size=10),
)
base64_sources = st.fixed_dictionaries(
    {"type": st.just("base64"), "media_type": mime_types, "data": base64_data()}
)
url_sources = st.fixed_dictionaries({"type": st.just("url"), "media_type": mime_types, "url": urls})
media_sources = base64_sources | url_sources

text_blocks = st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=20)})
image_blocks = st.fixed_dictionaries({"type": st.just("image"), "source": base64_sources})
tool_use_blocks = st.fixed_dictionaries(
    {"type": st.just("tool_use"), "id": st.text(max_size=8), "name": st.text(max_size=8)},
    optional={"input": json_objects, "signature": st.text(max_size=8)},
).map(lambda block: {"input": {}, **block})
reasoning_blocks = st.fixed_dictionaries(
    {"type": st.just("reasoning"), "text": st.text(max_size=20)},
    optional={
        "signature": st.text(max_size=8),
        "redactedData": st.text(max_size=8),
        "provenance": st.text(max_size=8),
    },
)
result_parts = (
    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=10)})
    | st.fixed_dictionaries({"type": st.just("image"), "source": media_sources})
    | st.fixed_dictionaries(
        {
            "type": st.just("file"),
            "filename": st.text(min_size=1, max_size=8).filter(str.strip),
            "source": media_sources,
        }
    )
)


@st.composite
def tool_result_blocks(draw: st.DrawFn) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": draw(st.text(max_size=8))}
    is_error = draw(st.none() | st.booleans())
    if is_error is not None:
        block["is_error"] = is_error
    if is_error:
        block["content"] = draw(st.text(max_size=20))
    else:
        block["content"] = draw(
            st.text(max_size=20) | st.lists(result_parts, min_size=1, max_size=3)
        )
    return block


_KNOWN = {"text", "image", "tool_use", "tool_result", "reasoning"}
unknown_blocks = st.builds(
    lambda kind, extra: {**extra, "type": kind},
    st.text(max_size=10).filter(lambda kind: kind not in _KNOWN),
    json_objects,
)
blocks = (
    text_blocks
    | image_blocks
    | tool_use_blocks
    | tool_result_blocks()
    | reasoning_blocks
    | unknown_blocks
)
messages_st = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]), "content": st.lists(blocks, max_size=4)}
)
conversations = st.lists(messages_st, max_size=6)


# -- helpers ------------------------------------------------------------------------------


def containers(value: Any) -> Iterator[Any]:
    """Every dict and list inside ``value``, ``value`` included."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(node.values())
        elif isinstance(node, list):
            yield node
            stack.extend(node)


def mutate_every_container(value: Any) -> None:
    for node in list(containers(value)):
        if isinstance(node, dict):
            for key in list(node):
                node[key] = "mutated"
            node["added"] = ["mutated"]
        else:
            node[:] = ["mutated"]


# -- the guard and the copy ------------------------------------------------------------------


@given(conversations)
def test_every_valid_conversation_passes(conversation: list[dict[str, Any]]) -> None:
    validate_messages(conversation)


@given(conversations)
def test_the_copy_equals_and_shares_no_mutable_object(conversation: list[dict[str, Any]]) -> None:
    snapshot = copy.deepcopy(conversation)
    copied = copy_messages(conversation)
    assert copied == conversation
    assert not {id(node) for node in containers(copied)} & {
        id(node) for node in containers(conversation)
    }
    mutate_every_container(conversation)
    assert copied == snapshot


@given(conversations)
def test_tuples_are_copied_as_lists(conversation: list[dict[str, Any]]) -> None:
    def as_tuples(value: Any) -> Any:
        if isinstance(value, list):
            return tuple(as_tuples(item) for item in value)
        if isinstance(value, dict):
            return {key: as_tuples(item) for key, item in value.items()}
        return value

    frozen = as_tuples(conversation)
    validate_messages(frozen)
    assert copy_messages(frozen) == conversation


# -- one corruption, one path ----------------------------------------------------------------
#
# A site is (path, corrupt): ``corrupt`` breaks the conversation at ``path``
# and nowhere else.  The guard must refuse it with exactly that path, or, for
# data that is shaped right but not JSON, the copy must.

Site = tuple[str, Callable[[list[Any]], None], bool]  # path, corrupt, caught by the copy


def _set(container: Any, key: Any, value: Any) -> Callable[[list[Any]], None]:
    def corrupt(_: list[Any]) -> None:
        container[key] = value

    return corrupt


def _delete(container: dict[str, Any], key: str) -> Callable[[list[Any]], None]:
    def corrupt(_: list[Any]) -> None:
        del container[key]

    return corrupt


NON_OBJECTS = [None, "x", 3, 2.5, True, []]
NON_JSON = [len, {1}, b"x", float("nan"), math.inf, 1j, object()]


def source_sites(source: dict[str, Any], path: str) -> Iterator[Site]:
    yield path + ".media_type", _set(source, "media_type", "image/png; q=1"), False
    yield path + ".media_type", _delete(source, "media_type"), False
    if source["type"] == "base64":
        yield path + ".data", _set(source, "data", source["data"] + "*"), False
        yield path + ".data", _set(source, "data", ""), False
    else:
        yield path + ".url", _set(source, "url", "ftp://example.com/x"), False
        yield path + ".url", _set(source, "url", "relative/x"), False


def block_sites(block: dict[str, Any], path: str) -> Iterator[Site]:
    kind = block["type"]
    yield path, _delete(block, "type"), False
    if kind in ("text", "reasoning"):
        yield path + ".text", _set(block, "text", 5), False
    elif kind == "image":
        yield path + ".source", _set(block, "source", "QQ=="), False
        yield from source_sites(block["source"], path + ".source")
    elif kind == "tool_use":
        yield path + ".id", _set(block, "id", None), False
        yield path + ".name", _delete(block, "name"), False
        yield path + ".input", _set(block, "input", [block["input"]]), False
        for bad in NON_JSON:
            yield path + ".input.bad", _set(block["input"], "bad", bad), True
    elif kind == "tool_result":
        yield path + ".tool_use_id", _set(block, "tool_use_id", 7), False
        yield path + ".is_error", _set(block, "is_error", "no"), False
        yield path + ".content", _set(block, "content", []), False
        yield path + ".content", _set(block, "content", {"text": "x"}), False
        content = block["content"]
        if isinstance(content, list):
            yield path + ".content", _set(block, "is_error", True), False
            for k, part in enumerate(content):
                part_path = f"{path}.content[{k}]"
                yield part_path, _set(content, k, None), False
                yield part_path + ".type", _set(part, "type", "video"), False
                if part["type"] == "text":
                    yield part_path + ".text", _delete(part, "text"), False
                else:
                    yield part_path + ".source", _set(part, "source", None), False
                    yield from source_sites(part["source"], part_path + ".source")
                if part["type"] == "file":
                    yield part_path + ".filename", _set(part, "filename", "  "), False
    else:
        for bad in NON_JSON:
            yield path + ".bad", _set(block, "bad", bad), True


def sites(conversation: list[dict[str, Any]]) -> Iterator[Site]:
    for i, message in enumerate(conversation):
        path = f"messages[{i}]"
        for bad in NON_OBJECTS:
            yield path, _set(conversation, i, bad), False
        yield path + ".content", _set(message, "content", "text"), False
        yield path + ".content", _delete(message, "content"), False
        yield path + ".role", _set(message, "role", "system"), False
        yield path + ".role", _delete(message, "role"), False
        yield path + ".extra.f", _set(message, "extra", {"f": print}), True
        for j, block in enumerate(message["content"]):
            block_path = f"{path}.content[{j}]"
            for bad in NON_OBJECTS:
                yield block_path, _set(message["content"], j, bad), False
            yield from block_sites(block, block_path)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(conversations.filter(bool), st.data())
def test_one_corruption_is_refused_with_its_path(
    conversation: list[dict[str, Any]], data: st.DataObject
) -> None:
    path, corrupt, by_copy = data.draw(st.sampled_from(list(sites(conversation))), label="site")
    corrupt(conversation)
    try:
        if by_copy:
            validate_messages(conversation)  # shaped right: only the copy can tell
            copy_messages(conversation)
        else:
            validate_messages(conversation)
    except InvalidMessageError as error:
        assert error.path == path
        prefix = "messages must contain cloneable" if by_copy else f"{path} "
        assert str(error).startswith(prefix)
    else:
        raise AssertionError(f"the corruption at {path} was accepted")


# -- the canonical base64 test against a literal reference --------------------------------------

_REFERENCE_SHAPE = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def reference_is_canonical(data: str) -> bool:
    """OMA's rule, literally: shape, length, non-empty, decode-encode round trip."""
    if not _REFERENCE_SHAPE.fullmatch(data) or len(data) % 4 == 1:
        return False
    stripped = data.rstrip("=")
    if not stripped:
        return False
    try:
        decoded = base64.b64decode(stripped + "=" * (-len(stripped) % 4), validate=True)
    except binascii.Error:
        return False
    return base64.b64encode(decoded).decode("ascii").rstrip("=") == stripped


_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


@given(st.text(_ALPHABET + "=" + "-_ *\n\té", max_size=12))
def test_canonical_base64_matches_the_reference_on_arbitrary_text(data: str) -> None:
    assert is_canonical_base64(data) == reference_is_canonical(data)


@given(st.text("AQgw+/=", max_size=9))
def test_canonical_base64_matches_the_reference_near_the_padding(data: str) -> None:
    assert is_canonical_base64(data) == reference_is_canonical(data)


@given(base64_data(), st.integers(0, 60), st.sampled_from(["=", "*", "A", "-", "é", ""]))
def test_canonical_base64_matches_the_reference_on_edited_payloads(
    data: str, position: int, insert: str
) -> None:
    position = min(position, len(data))
    edited = data[:position] + insert + data[position:]
    assert is_canonical_base64(data) and reference_is_canonical(data)
    assert is_canonical_base64(edited) == reference_is_canonical(edited)
