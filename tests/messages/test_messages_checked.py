"""``checked_copy`` is ``validate_messages`` then ``copy_messages``, in one walk.

For every input the other message tests build (valid conversations, one
corruption at each place, hostile values anywhere, subclasses, tuples,
deep and exponentially shared data) it returns the same copy or raises the
same error, word for word and path for path; and a valid input of exact
JSON types takes the one-walk path.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from enum import IntEnum
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oma_bridge.errors import InvalidMessageError
from oma_bridge.messages import (
    MAX_CONTAINERS,
    MAX_NESTING_DEPTH,
    checked_copy,
    copy_messages,
    validate_messages,
)
from oma_bridge.messages.checked import _checked_copy

from .test_messages_hostile import HOSTILE_VALUES, conversation, deep, positions
from .test_messages_properties import containers, conversations, sites


def reference(messages: Any) -> list[Any]:
    validate_messages(messages)
    return copy_messages(messages)


def outcome(fn: Any, messages: Any) -> tuple[Any, ...]:
    try:
        copied = fn(messages)
    except InvalidMessageError as error:
        return ("refused", str(error), error.path)
    return ("copied", copied, [type(node) for node in containers(copied)])


def assert_same(messages: Any) -> None:
    assert outcome(checked_copy, messages) == outcome(reference, messages)


@given(conversations)
def test_a_valid_conversation_takes_the_one_walk_path(conversation: list[Any]) -> None:
    copied = _checked_copy(conversation)
    assert copied == conversation
    assert not {id(node) for node in containers(copied)} & {
        id(node) for node in containers(conversation)
    }
    assert checked_copy(conversation) == copy_messages(conversation)


@given(conversations)
def test_tuples_give_the_same_copy(conversation: list[Any]) -> None:
    def as_tuples(value: Any) -> Any:
        if isinstance(value, list):
            return tuple(as_tuples(item) for item in value)
        if isinstance(value, dict):
            return {key: as_tuples(item) for key, item in value.items()}
        return value

    assert_same(as_tuples(conversation))


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(conversations.filter(bool), st.data())
def test_one_corruption_gets_the_reference_answer(conversation: list[Any], data: Any) -> None:
    _, corrupt, _ = data.draw(st.sampled_from(list(sites(conversation))), label="site")
    corrupt(conversation)
    assert_same(conversation)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("label", "make"), HOSTILE_VALUES, ids=[h[0] for h in HOSTILE_VALUES])
def test_a_hostile_value_anywhere_gets_the_reference_answer(label: str, make: Any) -> None:
    for place, _, _ in positions(conversation()):
        messages = conversation()
        container, key = next((c, k) for p, c, k in positions(messages) if p == place)
        container[key] = make()
        assert_same(messages)


def test_subclasses_are_copied_as_the_reference_copies_them() -> None:
    class Label(str):
        pass

    class Level(IntEnum):
        HIGH = 3

    messages: list[Any] = conversation()
    messages[0]["content"][0]["text"] = Label("look")
    messages[1]["content"][1]["input"]["level"] = Level.HIGH
    messages[2]["extra"] = OrderedDict(a=1)
    assert_same(messages)
    messages[0]["role"] = Label("user")
    assert_same(messages)
    messages[0] = OrderedDict(messages[0])
    assert_same(messages)


def test_a_str_subclass_key_is_refused_as_the_reference_refuses_it() -> None:
    class Key(str):
        pass

    messages: list[Any] = conversation()
    messages[0]["content"][0] = {Key("type"): "text", "text": "x"}
    assert_same(messages)
    messages = conversation()
    messages[0] = {Key("role"): "user", "content": []}
    assert_same(messages)


def test_extra_keys_of_a_message_are_copied() -> None:
    messages: list[Any] = conversation()
    messages[0]["meta"] = {"tags": ["a"]}
    messages[0]["alias"] = messages[0]["content"]  # the same list under a second key
    copied = checked_copy(messages)
    assert copied == messages
    assert copied[0]["meta"] is not messages[0]["meta"]
    assert copied[0]["alias"] is not messages[0]["content"]
    assert copied[0]["alias"] is not copied[0]["content"]


@pytest.mark.parametrize("levels", [MAX_NESTING_DEPTH - 5, MAX_NESTING_DEPTH - 4, 10_000])
def test_the_depth_limit_is_the_reference_one(levels: int) -> None:
    messages: list[Any] = conversation()
    messages[1]["content"][1]["input"] = {"tree": deep(levels)}
    assert_same(messages)
    messages[2]["deep"] = deep(levels)
    assert_same(messages)


def test_exponential_sharing_is_refused_quickly() -> None:
    shared: list[Any] = []
    for _ in range(60):
        shared = [shared, shared]
    messages: list[Any] = conversation()
    messages[1]["content"][1]["input"] = {"x": shared}
    with pytest.raises(InvalidMessageError, match=f"more than {MAX_CONTAINERS:,} objects"):
        checked_copy(messages)
    wide = [{"role": "user", "content": [{"type": "text", "text": "x"}] * 1_000}] * 1_001
    assert_same(wide)


def test_the_input_is_never_touched() -> None:
    messages = conversation()
    before = copy.deepcopy(messages)
    checked_copy(messages)
    assert messages == before


@pytest.mark.timeout(120)
@pytest.mark.parametrize("extra", [0, 1])
def test_the_container_budget_is_the_reference_one(extra: int) -> None:
    block = {"type": "text", "text": "x"}
    # The list, the message, its content and the blocks: MAX_CONTAINERS (+ extra) in all.
    messages = [{"role": "user", "content": [block] * (MAX_CONTAINERS - 3 + extra)}]
    assert_same(messages)
    assert (_checked_copy(messages) is None) == bool(extra)
