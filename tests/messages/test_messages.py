"""The shape guard, the copy and the normalisers, rule by rule.

Each guard rule of the reference (OMA's checks, section 2, then oma_bridge's
stricter D1 checks) gets one valid and one invalid case; the invalid case
asserts the exact message and ``InvalidMessageError.path``.  Every message is
``f"{path} {problem}"``, so a case names the path and the problem apart.
"""

from __future__ import annotations

from collections import OrderedDict
from enum import IntEnum
from typing import Any

import pytest

from oma_bridge.agent import AgentConfig, prepare_prompt_input
from oma_bridge.errors import InvalidMessageError
from oma_bridge.messages import (
    MAX_NESTING_DEPTH,
    copy_messages,
    is_canonical_base64,
    last_user_text,
    text_message,
    validate_content_blocks,
    validate_messages,
)

CLONEABLE = (
    "messages must contain cloneable structured data (strings, arrays, and plain data objects)"
)
PNG = "iVBORw0KGgo="  # canonical base64 (the PNG signature)


def user(*blocks: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def text(value: Any = "hi") -> dict[str, Any]:
    return {"type": "text", "text": value}


def b64(data: Any = PNG, media_type: Any = "image/png") -> dict[str, Any]:
    return {"type": "base64", "media_type": media_type, "data": data}


def url(value: Any = "https://example.com/a.png", media_type: Any = "image/png") -> dict[str, Any]:
    return {"type": "url", "media_type": media_type, "url": value}


def tool_result(content: Any = "ok", **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": "call_1", "content": content, **extra}


def part_image(source: Any) -> dict[str, Any]:
    return {"type": "image", "source": source}


def in_result(*parts: Any) -> list[dict[str, Any]]:
    """A conversation whose only block is a tool_result with these parts."""
    return [user(tool_result(list(parts)))]


MISSING: Any = object()


def without(block: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != key}


def refused(messages: object) -> InvalidMessageError:
    with pytest.raises(InvalidMessageError) as caught:
        validate_messages(messages)
    return caught.value


# -- the table ------------------------------------------------------------------
#
# (rule, valid input, invalid input, path, problem)

R = "messages[0].content[0]"  # the first block
P = f"{R}.content"  # the content of a tool_result in the first block
S = f"{P}[0].source"  # the source of its first part

RULES: list[tuple[str, object, object, str, str]] = [
    # OMA, section 2
    ("messages is an array", [], {"role": "user"}, "messages", "must be an array, got object"),
    ("messages: null", (), None, "messages", "must be an array, got null"),
    ("messages: string", [user()], "hi", "messages", "must be an array, got string"),
    ("messages: number", [user()], 3, "messages", "must be an array, got number"),
    ("messages: boolean", [user()], True, "messages", "must be an array, got boolean"),
    ("message is an object", [user()], [None], "messages[0]", "must be an object, got null"),
    ("message: array", [user()], [[]], "messages[0]", "must be an object, got array"),
    ("message: string", [user()], ["hi"], "messages[0]", "must be an object, got string"),
    (
        "content is an array",
        [user()],  # an empty content array is valid
        [{"role": "user", "content": "hi"}],
        "messages[0].content",
        "must be a ContentBlock[], got string",
    ),
    (
        "content: missing reads undefined",
        [{"role": "user", "content": ()}],
        [{"role": "user"}],
        "messages[0].content",
        "must be a ContentBlock[], got undefined",
    ),
    (
        "content: null",
        [user(text())],
        [{"role": "user", "content": None}],
        "messages[0].content",
        "must be a ContentBlock[], got null",
    ),
    (
        "block is an object",
        [user(text())],
        [user(None)],
        R,
        'must be a content block with a string "type"',
    ),
    (
        "block has a type",
        [user(text())],
        [user({"text": "hi"})],
        R,
        'must be a content block with a string "type"',
    ),
    (
        "block type is a string",
        [user(text())],
        [user({"type": 1})],
        R,
        'must be a content block with a string "type"',
    ),
    (
        "tool_use_id is a string",
        [user(tool_result())],
        [user({**tool_result(), "tool_use_id": 7})],
        f"{R}.tool_use_id",
        "must be a string",
    ),
    (
        "tool_use_id: missing",
        [user(tool_result())],
        [user(without(tool_result(), "tool_use_id"))],
        f"{R}.tool_use_id",
        "must be a string",
    ),
    (
        "is_error is a boolean",
        [user(tool_result(is_error=False))],
        [user(tool_result(is_error="yes"))],
        f"{R}.is_error",
        "must be a boolean when provided",
    ),
    (
        "is_error: null counts as provided",
        [user(tool_result())],
        [user(tool_result(is_error=None))],
        f"{R}.is_error",
        "must be a boolean when provided",
    ),
    (
        "tool_result content is a string or an array",
        [user(tool_result([text()]))],
        [user(tool_result(5))],
        P,
        "must be a string or a non-empty content-part array, got number",
    ),
    (
        "tool_result content: missing reads undefined",
        [user(tool_result(""))],
        [user(without(tool_result(), "content"))],
        P,
        "must be a string or a non-empty content-part array, got undefined",
    ),
    (
        "tool_result content: object",
        [user(tool_result("ok"))],
        [user(tool_result({"type": "text", "text": "x"}))],
        P,
        "must be a string or a non-empty content-part array, got object",
    ),
    (
        "tool_result content array is not empty",
        [user(tool_result([text()]))],
        [user(tool_result([]))],
        P,
        "must not be an empty content-part array",
    ),
    (
        "part is an object",
        in_result(text()),
        in_result(None),
        f"{P}[0]",
        "must be a content-part object",
    ),
    ("text part text", in_result(text("")), in_result(text(5)), f"{P}[0].text", "must be a string"),
    (
        "part type is known",
        in_result(text(), part_image(b64())),
        in_result(text(), {"type": "audio"}),
        f"{P}[1].type",
        'must be "text", "image", or "file"',
    ),
    (
        "part type: missing",
        in_result(text()),
        in_result({"text": "x"}),
        f"{P}[0].type",
        'must be "text", "image", or "file"',
    ),
    (
        "file part filename",
        in_result({"type": "file", "filename": "a.pdf", "source": b64()}),
        in_result({"type": "file", "filename": " \t", "source": b64()}),
        f"{P}[0].filename",
        "must be a non-empty string",
    ),
    (
        "file part source",
        in_result({"type": "file", "filename": "a.pdf", "source": url()}),
        in_result({"type": "file", "filename": "a.pdf", "source": "https://x.test/a.pdf"}),
        f"{P}[0].source",
        "must be a media source object",
    ),
    (
        "source is an object",
        in_result(part_image(b64())),
        in_result(part_image(None)),
        S,
        "must be a media source object",
    ),
    (
        "media_type is a non-empty string",
        in_result(part_image(b64(media_type="image/svg+xml"))),
        in_result(part_image(b64(media_type=""))),
        f"{S}.media_type",
        "must be a non-empty string",
    ),
    (
        "media_type is checked before type",
        in_result(part_image(url())),
        in_result(part_image({"type": "ftp"})),
        f"{S}.media_type",
        "must be a non-empty string",
    ),
    (
        "media_type has no parameters",
        in_result(part_image(b64(media_type="application/vnd.api+json"))),
        in_result(part_image(b64(media_type="text/plain; charset=utf-8"))),
        f"{S}.media_type",
        "must be a MIME type without parameters",
    ),
    (
        "media_type is type/subtype",
        in_result(part_image(b64(media_type="a/b"))),
        in_result(part_image(b64(media_type="png"))),
        f"{S}.media_type",
        "must be a MIME type without parameters",
    ),
    (
        "base64 data is a non-empty string",
        in_result(part_image(b64("QQ"))),
        in_result(part_image(b64(""))),
        f"{S}.data",
        "must be a non-empty string",
    ),
    (
        "base64 data: missing",
        in_result(part_image(b64("QQ=="))),
        in_result(part_image(without(b64(), "data"))),
        f"{S}.data",
        "must be a non-empty string",
    ),
    (
        "base64 data is canonical",
        in_result(part_image(b64("QQ="))),
        in_result(part_image(b64("QR=="))),
        f"{S}.data",
        "must contain raw base64 data",
    ),
    (
        "base64 data has no data: prefix",
        in_result(part_image(b64(PNG))),
        in_result(part_image(b64("data:image/png;base64," + PNG))),
        f"{S}.data",
        "must contain raw base64 data",
    ),
    (
        "url is a non-empty string",
        in_result(part_image(url("http://example.com/x"))),
        in_result(part_image(url(""))),
        f"{S}.url",
        "must be a non-empty string",
    ),
    (
        "url is absolute",
        in_result(part_image(url("HTTPS://EXAMPLE.COM/x"))),
        in_result(part_image(url("/images/a.png"))),
        f"{S}.url",
        "must be an absolute HTTP(S) URL",
    ),
    (
        "url has a host",
        in_result(part_image(url("https://example.com"))),
        in_result(part_image(url("http://"))),
        f"{S}.url",
        "must be an absolute HTTP(S) URL",
    ),
    (
        "url is HTTP(S)",
        in_result(part_image(url("http://127.0.0.1:8080/a.png"))),
        in_result(part_image(url("ftp://example.com/a.png"))),
        f"{S}.url",
        "must use HTTP or HTTPS",
    ),
    (
        "url scheme: data",
        in_result(part_image(url())),
        in_result(part_image(url("data:image/png;base64," + PNG))),
        f"{S}.url",
        "must use HTTP or HTTPS",
    ),
    (
        "source type is base64 or url",
        in_result(part_image(b64())),
        in_result(part_image({"type": "file", "media_type": "image/png", "file_id": "f1"})),
        f"{S}.type",
        'must be "base64" or "url"',
    ),
    (
        "error tool result content is a string",
        [user(tool_result("boom", is_error=True))],
        [user(tool_result([text("boom")], is_error=True))],
        P,
        "must be a string for an error tool result",
    ),
    (
        "error tool result: the content check comes first",
        [user(tool_result([text()], is_error=False))],
        [user(tool_result([], is_error=True))],
        P,
        "must not be an empty content-part array",
    ),
    # oma_bridge, D1
    (
        "role is user or assistant",
        [{"role": "assistant", "content": []}],
        [{"role": "system", "content": []}],
        "messages[0].role",
        'must be "user" or "assistant"',
    ),
    (
        "role: missing",
        [user()],
        [{"content": []}],
        "messages[0].role",
        'must be "user" or "assistant"',
    ),
    (
        "role: not a string",
        [user()],
        [{"role": ["user"], "content": []}],
        "messages[0].role",
        'must be "user" or "assistant"',
    ),
    ("text block text", [user(text(""))], [user(text(None))], f"{R}.text", "must be a string"),
    (
        "text block: missing text",
        [user(text("x"))],
        [user({"type": "text"})],
        f"{R}.text",
        "must be a string",
    ),
    (
        "image source is canonical base64",
        [user(text(), part_image(b64()))],
        [user(text(), part_image(b64("QR==")))],
        "messages[0].content[1].source.data",
        "must contain raw base64 data",
    ),
    (
        "image source is base64, never a url",
        [user(part_image(b64()))],
        [user(part_image(url()))],
        f"{R}.source.type",
        'must be "base64"',
    ),
    (
        "image source is an object",
        [user(part_image(b64()))],
        [user({"type": "image"})],
        f"{R}.source",
        "must be a media source object",
    ),
    (
        "image media_type",
        [user(part_image(b64(media_type="image/webp")))],
        [user(part_image(b64(media_type="image")))],
        f"{R}.source.media_type",
        "must be a MIME type without parameters",
    ),
    (
        "tool_use id",
        [user({"type": "tool_use", "id": "c1", "name": "f", "input": {}})],
        [user({"type": "tool_use", "id": 1, "name": "f", "input": {}})],
        f"{R}.id",
        "must be a string",
    ),
    (
        "tool_use name",
        [user({"type": "tool_use", "id": "c1", "name": "", "input": {"a": [1]}})],
        [user({"type": "tool_use", "id": "c1", "input": {}})],
        f"{R}.name",
        "must be a string",
    ),
    (
        "tool_use input is an object",
        [user({"type": "tool_use", "id": "c1", "name": "f", "input": {}, "signature": "s"})],
        [user({"type": "tool_use", "id": "c1", "name": "f", "input": ["a"]})],
        f"{R}.input",
        "must be an object, got array",
    ),
    (
        "tool_use input: missing reads undefined",
        [user({"type": "tool_use", "id": "c1", "name": "f", "input": {"x": None}})],
        [user({"type": "tool_use", "id": "c1", "name": "f"})],
        f"{R}.input",
        "must be an object, got undefined",
    ),
    (
        "reasoning text",
        [user({"type": "reasoning", "text": "hmm", "signature": "s", "provenance": "x"})],
        [user({"type": "reasoning", "redactedData": "..."})],
        f"{R}.text",
        "must be a string",
    ),
]


@pytest.mark.parametrize(
    ("valid", "invalid", "path", "problem"),
    [pytest.param(*rule[1:], id=rule[0]) for rule in RULES],
)
def test_guard_rule(valid: object, invalid: object, path: str, problem: str) -> None:
    validate_messages(valid)
    error = refused(invalid)
    assert str(error) == f"{path} {problem}"
    assert error.message == f"{path} {problem}"
    assert error.path == path
    assert error.code == "INVALID_MESSAGE"


def test_the_reference_example_path() -> None:
    error = refused(in_result(part_image(url("ftp://x.test/a"))))
    assert str(error) == "messages[0].content[0].content[0].source.url must use HTTP or HTTPS"


def test_paths_count_messages_and_blocks() -> None:
    messages = [user(text()), {"role": "assistant", "content": [text(), text(), text(3)]}]
    assert str(refused(messages)) == "messages[1].content[2].text must be a string"
    messages = [user(text()), user(tool_result(), tool_result([text(), text(None)]))]
    assert str(refused(messages)) == "messages[1].content[1].content[1].text must be a string"


def test_a_block_object_twice_is_reported_at_its_first_place() -> None:
    bad = text(1)
    assert str(refused([user(text(), bad, bad)])) == "messages[0].content[1].text must be a string"
    broken = tool_result(None)
    error = refused([user(text(), broken, text(), broken)])
    assert error.path == "messages[0].content[1].content"


# -- order: OMA's message wins over D1's --------------------------------------------


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        pytest.param(
            [{"role": "system", "content": []}, None],
            "messages[1] must be an object, got null",
            id="a later non-object beats an earlier bad role",
        ),
        pytest.param(
            [user(text(5)), user(tool_result(is_error=1))],
            "messages[1].content[0].is_error must be a boolean when provided",
            id="a later tool_result beats an earlier bad text",
        ),
        pytest.param(
            [user(part_image(url())), user({"type": 3})],
            'messages[1].content[0] must be a content block with a string "type"',
            id="a later untyped block beats an earlier url image",
        ),
        pytest.param(
            [{"role": "bot", "content": [text(5)]}],
            'messages[0].role must be "user" or "assistant"',
            id="among D1 violations the first in order wins",
        ),
        pytest.param(
            [user(text(5)), {"role": "bot", "content": []}],
            "messages[0].content[0].text must be a string",
            id="a bad block before a bad role of a later message",
        ),
    ],
)
def test_oma_checks_come_first(messages: object, expected: str) -> None:
    assert str(refused(messages)) == expected


def test_unknown_block_types_pass_unchanged() -> None:
    block = {"type": "document", "source": {"anything": [1, 2.5, None]}, "text": 5}
    messages = [user(block, {"type": ""})]
    validate_messages(messages)
    assert copy_messages(messages) == messages


def test_tuples_count_as_arrays() -> None:
    validate_messages(({"role": "user", "content": (text(), tool_result((text(),)))},))


# -- the prompt path -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("blocks", "expected"),
    [
        (None, "messages[0].content must be a ContentBlock[], got null"),
        ([None], 'messages[0].content[0] must be a content block with a string "type"'),
        ("hi", "messages[0].content must be a ContentBlock[], got string"),
        ([text(), text(1)], "messages[0].content[1].text must be a string"),
    ],
)
def test_validate_content_blocks_wraps_as_one_user_message(blocks: object, expected: str) -> None:
    with pytest.raises(InvalidMessageError) as caught:
        validate_content_blocks(blocks)
    assert str(caught.value) == expected


def _prompt_turn(blocks: object) -> list[Any]:
    """What ``agent/prompt`` makes of ``ContentBlock[]``: one user message, guarded and copied."""
    return [prepare_prompt_input(blocks, AgentConfig(name="t", provider="echo", model="echo-1"))]


def test_a_prompt_turn_is_one_user_message_and_a_copy() -> None:
    blocks = [text("look"), part_image(b64())]
    messages = _prompt_turn(blocks)
    assert messages == [{"role": "user", "content": blocks}]
    messages[0]["content"][1]["source"]["data"] = "changed"
    assert blocks[1]["source"]["data"] == PNG
    assert _prompt_turn([]) == [{"role": "user", "content": []}]


def test_a_prompt_turn_copy_refusal_names_the_wrapped_path() -> None:
    blocks = [text(), {"type": "tool_use", "id": "c", "name": "f", "input": {"f": {1, 2}}}]
    with pytest.raises(InvalidMessageError) as caught:
        _prompt_turn(blocks)
    assert caught.value.path == "messages[0].content[1].input.f"


def test_text_message() -> None:
    assert text_message("hi") == {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    assert text_message("", "assistant") == {
        "role": "assistant",
        "content": [{"type": "text", "text": ""}],
    }
    validate_messages([text_message("x")])


def test_last_user_text() -> None:
    messages = [
        user(text("old")),
        {"role": "assistant", "content": [text("answer")]},
        user(text("first"), part_image(b64()), text("second")),
        {"role": "assistant", "content": []},
    ]
    assert last_user_text(messages, "") == "firstsecond"  # type: ignore[arg-type]
    assert last_user_text(messages, "\n") == "first\nsecond"  # type: ignore[arg-type]
    assert last_user_text([user(part_image(b64()))], "") == ""  # type: ignore[list-item]
    assert last_user_text([], "\n") == ""


# -- the canonical base64 test -----------------------------------------------------------


@pytest.mark.parametrize(
    "data", ["QQ", "QQ=", "QQ==", "QUI", "QUI=", "QUJD", "QUJD==", PNG, "+/+/"]
)
def test_canonical_base64_accepts(data: str) -> None:
    assert is_canonical_base64(data)


@pytest.mark.parametrize(
    "data",
    [
        "",
        "=",
        "==",
        "Q",
        "QR==",  # spare bits set
        "QUJ=",  # spare bits set (three characters)
        "QUJDQ",  # length mod 4 == 1
        "QQ===",
        "QUJD===",
        "Q=Q=",
        "QQ\n",
        "QQ==\n",
        " QQ",
        "QQ-_",  # the URL-safe alphabet
        "QUJDé",
        "data:,QQ",
    ],
)
def test_canonical_base64_refuses(data: str) -> None:
    assert not is_canonical_base64(data)


def test_canonical_base64_on_a_long_payload_checks_every_chunk() -> None:
    body = "QUJD" * 100_000  # 400,000 characters: several chunks
    assert is_canonical_base64(body)
    for position in (0, 65_535, 65_536, 200_001, len(body) - 1):
        assert not is_canonical_base64(body[:position] + "*" + body[position + 1 :])
        assert not is_canonical_base64(body[:position] + "=" + body[position + 1 :])


# -- the copy ---------------------------------------------------------------------------


def test_copy_is_equal_and_independent() -> None:
    original = [
        user(text(), {"type": "tool_use", "id": "c", "name": "f", "input": {"a": [1, {"b": 2.5}]}})
    ]
    copied = copy_messages(original)
    assert copied == original
    copied[0]["content"][1]["input"]["a"][1]["b"] = 3
    copied[0]["content"].append(text())
    assert original[0]["content"][1]["input"]["a"][1]["b"] == 2.5
    assert len(original[0]["content"]) == 2


def test_copy_turns_tuples_into_lists() -> None:
    copied = copy_messages(({"role": "user", "content": (text(), {"type": "x", "v": (1, (2,))})},))
    assert copied == [{"role": "user", "content": [text(), {"type": "x", "v": [1, [2]]}]}]
    assert type(copied) is list
    assert type(copied[0]["content"][1]["v"][1]) is list


def test_copy_makes_subclasses_of_json_types_plain() -> None:
    class Label(str):
        pass

    class Level(IntEnum):
        HIGH = 3

    class Ratio(float):
        pass

    class Items(list[Any]):
        pass

    value = OrderedDict(a=Label("x"), b=Level.HIGH, c=Ratio(0.5), d=Items([1]))
    copied = copy_messages([value])
    assert copied == [{"a": "x", "b": 3, "c": 0.5, "d": [1]}]
    assert [type(v) for v in copied[0].values()] == [str, int, float, list]
    assert type(copied[0]) is dict


def test_copy_keeps_every_json_scalar() -> None:
    scalars = ["", "é", 0, -1, 2**80, 0.0, -0.0, 1e308, True, False, None]
    assert copy_messages(scalars) == scalars


@pytest.mark.parametrize(
    ("value", "path", "reason"),
    [
        ({"f": len}, "messages[0].f", "is not JSON data (a function)"),
        ({"f": lambda: None}, "messages[0].f", "is not JSON data (a function)"),
        ({"s": {1}}, "messages[0].s", "is not JSON data (a value of type set)"),
        ({"b": b"x"}, "messages[0].b", "is not JSON data (a value of type bytes)"),
        ({"n": float("nan")}, "messages[0].n", "is a non-finite number (nan)"),
        ({"n": float("-inf")}, "messages[0].n", "is a non-finite number (-inf)"),
        ({1: "x"}, "messages[0]", "has a non-string key of type int"),
        ({"a b": [0, {None: 1}]}, 'messages[0]["a b"][1]', "has a non-string key of type NoneType"),
        ({"c": 1j}, "messages[0].c", "is not JSON data (a value of type complex)"),
        ({"t": object}, "messages[0].t", "is not JSON data (a value of type type)"),
    ],
)
def test_copy_refuses_what_is_not_json(value: object, path: str, reason: str) -> None:
    with pytest.raises(InvalidMessageError) as caught:
        copy_messages([value])
    assert str(caught.value) == f"{CLONEABLE}: {path} {reason}"
    assert caught.value.path == path
    assert caught.value.code == "INVALID_MESSAGE"


def test_copy_refusal_path_in_a_conversation() -> None:
    messages = [
        user(text()),
        user({"type": "tool_use", "id": "c", "name": "f", "input": {"x": len}}),
    ]
    with pytest.raises(InvalidMessageError) as caught:
        copy_messages(messages)
    assert caught.value.path == "messages[1].content[0].input.x"


def test_copy_refuses_a_top_level_that_is_not_an_array() -> None:
    with pytest.raises(InvalidMessageError) as caught:
        copy_messages({"role": "user"})  # type: ignore[arg-type]
    assert str(caught.value) == f"{CLONEABLE}: messages is not an array"


def test_copy_depth_limit_is_exact() -> None:
    def nested(levels: int) -> Any:
        value: Any = "leaf"
        for _ in range(levels):
            value = [value]
        return value

    # The message list is level 1: MAX_NESTING_DEPTH containers in all are fine.
    assert copy_messages(nested(MAX_NESTING_DEPTH)) == nested(MAX_NESTING_DEPTH)
    with pytest.raises(InvalidMessageError) as caught:
        copy_messages(nested(MAX_NESTING_DEPTH + 1))
    assert str(caught.value).endswith(f"nests deeper than {MAX_NESTING_DEPTH} levels")


def test_validated_large_payloads_are_remembered_within_a_bound() -> None:
    import oma_bridge.messages.guard as messages_module

    def image(data: str) -> list[dict[str, Any]]:
        source = {"type": "base64", "media_type": "image/png", "data": data}
        return [{"role": "user", "content": [{"type": "image", "source": source}]}]

    big = "QUFB" * (messages_module._REMEMBER_FROM // 4)  # noqa: SLF001 — the guard's memory of valid base64, bounded
    validate_messages(image(big))
    assert big in messages_module._remembered  # noqa: SLF001 — the guard's memory of valid base64, bounded
    broken = big[:-4] + "QR=="  # non-zero spare bits: never remembered, always refused
    for _ in range(2):
        with pytest.raises(InvalidMessageError, match="must contain raw base64 data"):
            validate_messages(image(broken))
    assert broken not in messages_module._remembered  # noqa: SLF001 — the guard's memory of valid base64, bounded
    step = messages_module._REMEMBER_AT_MOST // 4  # noqa: SLF001 — the guard's memory of valid base64, bounded
    for index in range(6):
        validate_messages(image(chr(ord("A") + index) * 4 + "QUFB" * (step // 4)))
    assert messages_module._remembered_size <= messages_module._REMEMBER_AT_MOST  # noqa: SLF001 — the guard's memory of valid base64, bounded
    assert big not in messages_module._remembered  # noqa: SLF001 — the guard's memory of valid base64, bounded; the oldest went first


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("https://example.com/a.png", None),
        ("http:example.com", None),  # WHATWG: slashes are optional for http(s)
        ("HTTP://EXAMPLE.COM", None),
        ("http://[::1]:80/x", None),
        ("http://user:pw@host/", None),
        ("  https://padded.example  ", None),
        ("http://a b.com", "must be an absolute HTTP(S) URL"),  # a space in the host
        ("http://x:99999", "must be an absolute HTTP(S) URL"),  # no such port
        ("http://[zz]/", "must be an absolute HTTP(S) URL"),
        ("http://", "must be an absolute HTTP(S) URL"),
        ("/relative/path", "must be an absolute HTTP(S) URL"),
        ("ftp://example.com/x", "must use HTTP or HTTPS"),
        ("mailto:someone", "must use HTTP or HTTPS"),
    ],
)
def test_url_sources_parse_as_javascript_does(url: str, problem: str | None) -> None:
    source = {"type": "url", "media_type": "image/png", "url": url}
    part = {"type": "image", "source": source}
    messages = [
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t", "content": [part]}],
        }
    ]
    if problem is None:
        validate_messages(messages)
        return
    with pytest.raises(InvalidMessageError) as caught:
        validate_messages(messages)
    assert str(caught.value) == f"messages[0].content[0].content[0].source.url {problem}"
