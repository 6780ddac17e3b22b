"""Bad input gets a clear error, never a crash.

Non-JSON data, deep nesting, reference cycles, a 50 MB image, a non-list
where a list belongs and ``None`` anywhere: each is either accepted and
copied, or refused with ``InvalidMessageError`` naming the path (the place
itself, one of its ancestors, or for a nested refusal a place inside it);
never a ``RecursionError``, never a hang (each test is bounded in time).
"""

from __future__ import annotations

import base64
import copy
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from oma_bridge.errors import InvalidMessageError
from oma_bridge.messages import MAX_NESTING_DEPTH, copy_messages, validate_messages

CLONEABLE = (
    "messages must contain cloneable structured data (strings, arrays, and plain data objects)"
)
PNG = "iVBORw0KGgo="


def conversation() -> list[dict[str, Any]]:
    """One of each block kind, parts and sources included."""
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "reasoning", "text": "hmm", "signature": "sig"},
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "read",
                    "input": {"path": "a.txt", "lines": [1, 2], "opts": {"raw": True}},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_1",
                    "content": [
                        {"type": "text", "text": "done"},
                        {
                            "type": "image",
                            "source": {
                                "type": "url",
                                "media_type": "image/jpeg",
                                "url": "https://example.com/a.jpg",
                            },
                        },
                        {
                            "type": "file",
                            "filename": "a.pdf",
                            "source": {
                                "type": "base64",
                                "media_type": "application/pdf",
                                "data": "JVBERi0=",
                            },
                        },
                    ],
                    "is_error": False,
                },
                {"type": "future_block", "payload": {"k": [None, 1.5]}},
            ],
        },
    ]


def segment(key: object) -> str:
    return f"[{key}]" if isinstance(key, int) else f".{key}"


def positions(value: Any, path: str = "messages") -> Iterator[tuple[str, Any, object]]:
    """(path, container, key) of every value inside ``value``."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in list(items):
        item_path = path + segment(key)
        yield item_path, value, key
        if isinstance(item, dict | list):
            yield from positions(item, item_path)


def related(place: str, path: str | None) -> bool:
    """``path`` is ``place``, an ancestor of it, or a place inside it."""
    assert path is not None

    def within(inner: str, outer: str) -> bool:
        return inner == outer or inner.startswith((outer + ".", outer + "["))

    return within(place, path) or within(path.split("...")[0], place)


def guard_and_copy(messages: Any) -> list[Any]:
    validate_messages(messages)
    return copy_messages(messages)


def deep(levels: int, make: Callable[[Any], Any] = lambda inner: [inner]) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = make(value)
    return value


class Hostile:
    """An object that fails every comparison, hash, truth test and conversion."""

    def _refuse(self, *_: object) -> Any:
        raise RuntimeError("touched")

    __eq__ = __ne__ = __lt__ = __hash__ = __bool__ = __len__ = __iter__ = _refuse  # type: ignore[assignment]
    __str__ = __repr__ = __int__ = __float__ = __index__ = _refuse  # type: ignore[assignment]


def self_cycle() -> Any:
    loop: dict[str, Any] = {}
    loop["again"] = loop
    return loop


HOSTILE_VALUES: list[tuple[str, Callable[[], Any]]] = [
    ("None", lambda: None),
    ("a function", lambda: len),
    ("a lambda", lambda: lambda: None),
    ("a set", lambda: {1, 2}),
    ("bytes", lambda: b"\x00"),
    ("NaN", lambda: float("nan")),
    ("infinity", lambda: float("inf")),
    ("a dict with a non-str key", lambda: {("a",): 1}),
    ("a self cycle", self_cycle),
    ("a list holding itself", lambda: (lambda x: (x.append(x), x)[1])([])),
    ("10,000 nested lists", lambda: deep(10_000)),
    ("10,000 nested dicts", lambda: deep(10_000, lambda inner: {"d": inner})),
    ("an object", object),
    ("a hostile object", Hostile),
    ("an empty dict", dict),
    ("a string", lambda: "x"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("label", "make"), HOSTILE_VALUES, ids=[h[0] for h in HOSTILE_VALUES])
def test_a_hostile_value_anywhere_is_copied_or_refused_with_its_path(
    label: str, make: Callable[[], Any]
) -> None:
    count = 0
    for place, _, _ in positions(conversation()):
        messages = conversation()
        container, key = next((c, k) for p, c, k in positions(messages) if p == place)
        container[key] = make()
        try:
            copied = guard_and_copy(messages)
        except InvalidMessageError as error:
            assert related(place, error.path), (label, place, error.path, str(error))
            assert str(error).startswith(error.path + " ") or str(error).startswith(
                f"{CLONEABLE}: {error.path} "
            )
            count += 1
        else:
            assert copied == messages  # accepted: copied whole
    assert count > 0


def test_the_cycle_through_the_list_itself() -> None:
    messages: list[Any] = [{"role": "user", "content": []}]
    messages[0]["content"].append({"type": "x", "loop": messages})
    with pytest.raises(InvalidMessageError) as caught:
        guard_and_copy(messages)
    assert str(caught.value) == f"{CLONEABLE}: messages[0].content[0].loop is a reference cycle"
    assert caught.value.path == "messages[0].content[0].loop"


def test_a_cycle_in_tool_input_names_where_it_closes() -> None:
    messages = conversation()
    tool_input = messages[1]["content"][1]["input"]
    tool_input["opts"]["back"] = tool_input
    with pytest.raises(InvalidMessageError) as caught:
        guard_and_copy(messages)
    assert caught.value.path == "messages[1].content[1].input.opts.back"
    assert str(caught.value).endswith("is a reference cycle")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("levels", [MAX_NESTING_DEPTH, 10_000, 200_000])
def test_deep_nesting_in_tool_input_is_refused_with_a_path(levels: int) -> None:
    messages = conversation()
    messages[1]["content"][1]["input"] = {"tree": deep(levels)}
    validate_messages(messages)  # the guard does not descend into tool input
    with pytest.raises(InvalidMessageError) as caught:
        copy_messages(messages)
    error = caught.value
    assert error.path is not None
    assert error.path.startswith("messages[1].content[1].input.tree[0][0]")
    assert error.path.endswith("levels)")  # the head of the path, then the depth left out
    assert str(error) == f"{CLONEABLE}: {error.path} nests deeper than {MAX_NESTING_DEPTH} levels"
    assert len(str(error)) < 300


def test_deep_nesting_fails_the_same_from_a_deep_call_stack() -> None:
    def at_depth(frames: int) -> None:
        if frames:
            at_depth(frames - 1)
            return
        with pytest.raises(InvalidMessageError):
            copy_messages([deep(10_000)])

    at_depth(sys.getrecursionlimit() - MAX_NESTING_DEPTH * 2 - 100)


@pytest.mark.timeout(60)
def test_a_50_mb_image_is_accepted_and_copied() -> None:
    data = base64.b64encode(bytes(range(256)) * (50 * 1024 * 1024 // 256)).decode("ascii")
    messages = conversation()
    messages[0]["content"][1]["source"]["data"] = data
    copied = guard_and_copy(messages)
    assert copied[0]["content"][1]["source"]["data"] is data  # strings are shared, not copied
    assert copied[0]["content"][1] is not messages[0]["content"][1]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("position", [0, 30_000_000, -3])
def test_a_50_mb_image_with_one_bad_character_is_refused(position: int) -> None:
    data = base64.b64encode(b"\xfb" * (50 * 1024 * 1024)).decode("ascii")  # "+/v7+/v7..."
    data = data[:position] + "!" + data[position + 1 :] if position >= 0 else data[:-3] + "!" + "=="
    messages = conversation()
    messages[0]["content"][1]["source"]["data"] = data
    with pytest.raises(InvalidMessageError) as caught:
        validate_messages(messages)
    assert str(caught.value) == "messages[0].content[1].source.data must contain raw base64 data"


NON_LISTS = [None, "text", 3, {"type": "text", "text": "x"}, {1, 2}, b"ab", len]


@pytest.mark.parametrize("value", NON_LISTS, ids=repr)
@pytest.mark.parametrize(
    ("where", "path", "problem"),
    [
        ("messages", "messages", "must be an array, got "),
        ("content", "messages[0].content", "must be a ContentBlock[], got "),
        (
            "tool_result content",
            "messages[2].content[0].content",
            "must be a string or a non-empty content-part array, got ",
        ),
    ],
)
def test_a_non_list_where_a_list_belongs(value: Any, where: str, path: str, problem: str) -> None:
    messages: Any = conversation()
    if where == "messages":
        messages = value
    elif where == "content":
        messages[0]["content"] = value
    else:
        messages[2]["content"][0]["content"] = value
    if where == "tool_result content" and isinstance(value, str):
        guard_and_copy(messages)  # a string is valid tool_result content
        return
    with pytest.raises(InvalidMessageError) as caught:
        guard_and_copy(messages)
    assert caught.value.path == path
    assert str(caught.value).startswith(f"{path} {problem}")


def test_none_for_each_message_and_block() -> None:
    for i in range(3):
        messages: list[Any] = conversation()
        messages[i] = None
        with pytest.raises(InvalidMessageError, match=rf"^messages\[{i}\] must be an object"):
            guard_and_copy(messages)
    messages = conversation()
    messages[1]["content"][1] = None
    with pytest.raises(InvalidMessageError) as caught:
        guard_and_copy(messages)
    assert (
        str(caught.value) == 'messages[1].content[1] must be a content block with a string "type"'
    )


def test_guard_and_copy_never_touch_the_input() -> None:
    messages = conversation()
    before = copy.deepcopy(messages)
    guard_and_copy(messages)
    assert messages == before


def test_shared_sublists_that_expand_exponentially_are_refused_quickly() -> None:
    from oma_bridge.messages import MAX_CONTAINERS

    shared: list[Any] = []
    for _ in range(60):
        shared = [shared, shared]  # 2**60 containers once written out as JSON
    # Unbounded, this would never finish; pytest-timeout guards against a hang.
    with pytest.raises(InvalidMessageError) as caught:
        copy_messages(
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_use", "id": "1", "name": "n", "input": {"x": shared}}
                    ],
                }
            ]
        )
    assert str(caught.value) == (
        "messages must contain cloneable structured data (strings, arrays, and plain data "
        f"objects): messages holds more than {MAX_CONTAINERS:,} objects and arrays once expanded"
    )
    assert caught.value.path == "messages"
    # Moderate sharing is fine: each place gets its own copy.
    small: list[Any] = []
    for _ in range(8):
        small = [small, small]
    message = {
        "role": "user",
        "content": [{"type": "tool_use", "id": "1", "name": "n", "input": {"x": small}}],
    }
    copied = copy_messages([message])
    assert copied == [message]
    first, second = copied[0]["content"][0]["input"]["x"]
    assert first == second and first is not second
