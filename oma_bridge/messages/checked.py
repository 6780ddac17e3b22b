"""The guard and the copy in one walk: what every structured input pays.

:func:`checked_copy` is ``validate_messages(m)`` followed by
``copy_messages(m)``: it returns the same copy and raises the same errors.
It first walks the input once, copying as it checks, and accepts only what
it can tell is valid without doubt: exact JSON types (no subclass, no
tuple below the content lists, no float that is not finite), string keys,
and every check of the guard on the known blocks.  At the first doubt it
stops and runs the two reference functions on the input, so every error
(and the copy of an input that is valid but off this path, such as one
holding a ``str`` subclass) comes from them, word for word.

The walk runs no code of the caller's objects that the reference would not
run at the same point: it compares only exact strings, and it checks the
keys of a dict before copying it.  A doubt costs the walk so far plus the
reference's two passes; a valid input pays one walk instead of two.
"""

from __future__ import annotations

import math
from typing import Any

from oma_bridge.errors import InvalidMessageError
from oma_bridge.messages.copy import MAX_CONTAINERS, MAX_NESTING_DEPTH, copy_messages
from oma_bridge.messages.guard import _check_source, _check_tool_result, validate_messages

__all__ = ["checked_copy"]

#: Values shared instead of copied: immutable, and exactly JSON.
_ATOMS = frozenset({str, int, bool, type(None)})


class _Doubt(Exception):
    """Something only the reference functions may judge."""


def checked_copy(messages: object) -> list[Any]:
    """``validate_messages(messages)`` then ``copy_messages(messages)``, in one walk."""
    copied = _checked_copy(messages)
    if copied is None:
        validate_messages(messages)
        copied = copy_messages(messages)  # type: ignore[arg-type]  # the guard proved the shape
    return copied


def _checked_copy(messages: object) -> list[Any] | None:
    """The copy of valid ``messages``, or ``None`` at the first doubt.

    Depths and the container budget count as in ``copy_messages``: the list
    is level 0, a message 1, its content 2, a block 3.  The containers of
    this skeleton are counted in ``skeleton``, those below the blocks in
    ``budget`` (by ``_copy_json``); their sum is the reference's count.
    """
    if type(messages) is not list and type(messages) is not tuple:
        return None
    skeleton = 1
    budget = [MAX_CONTAINERS]
    out: list[Any] = []
    try:
        for message in messages:
            if type(message) is not dict:
                return None
            content = message["content"]  # a subscript costs half a .get() call
            role = message["role"]
            if (
                (type(content) is not list and type(content) is not tuple)
                or type(role) is not str
                or (role != "user" and role != "assistant")
            ):
                return None
            for key in message:
                if type(key) is not str:
                    return None
            copied = message.copy()
            if len(message) > 2:  # more than role and content
                for key, value in message.items():
                    if key != "content" and type(value) not in _ATOMS:
                        copied[key] = _copy_json(value, 2, budget)
            skeleton += 2 + len(content)
            if skeleton > MAX_CONTAINERS:
                return None
            blocks: list[Any] = []
            copied["content"] = blocks
            for block in content:
                if type(block) is not dict:
                    return None
                kind = block["type"]
                if type(kind) is not str:
                    return None
                for key in block:
                    if type(key) is not str:
                        return None
                # The most common block by far, inline: type and text, both strings.
                if kind == "text" and len(block) == 2 and type(block["text"]) is str:
                    blocks.append(block.copy())
                else:
                    blocks.append(_copy_block(block, kind, budget))
            out.append(copied)
    except (_Doubt, KeyError):  # KeyError: a key the guard requires is missing
        return None
    if skeleton + MAX_CONTAINERS - budget[0] > MAX_CONTAINERS:
        return None
    return out


def _copy_block(block: dict[str, Any], kind: str, budget: list[int]) -> dict[str, Any]:
    _check_block(block, kind)
    copied = block.copy()
    for key, value in block.items():
        if type(value) not in _ATOMS:
            copied[key] = _copy_json(value, 4, budget)
    return copied


def _check_block(block: dict[str, Any], kind: str) -> None:
    """The guard's checks of one block (OMA's and D1), exact types only."""
    if kind == "text" or kind == "reasoning":
        if type(block.get("text")) is not str:
            raise _Doubt
    elif kind == "tool_use":
        if (
            type(block.get("id")) is not str
            or type(block.get("name")) is not str
            or type(block.get("input")) is not dict
        ):
            raise _Doubt
    elif kind == "tool_result" or kind == "image":
        try:
            if kind == "tool_result":
                _check_tool_result(block, "")
            else:
                _check_source(block.get("source"), "", allow_url=False)
        except InvalidMessageError:
            raise _Doubt from None


def _copy_json(value: Any, depth: int, budget: list[int]) -> Any:
    """``copy._copy_value`` for exact JSON types; anything else is a doubt."""
    kind = type(value)
    if kind is dict:
        if depth >= MAX_NESTING_DEPTH:
            raise _Doubt
        budget[0] -= 1
        if budget[0] < 0:
            raise _Doubt
        for key in value:
            if type(key) is not str:
                raise _Doubt
        out = value.copy()
        for key, item in value.items():
            if type(item) not in _ATOMS:
                out[key] = _copy_json(item, depth + 1, budget)
        return out
    if kind is list or kind is tuple:
        if depth >= MAX_NESTING_DEPTH:
            raise _Doubt
        budget[0] -= 1
        if budget[0] < 0:
            raise _Doubt
        copied = list(value)
        index = 0  # cheaper than enumerate's tuple per item
        for item in value:
            if type(item) not in _ATOMS:
                copied[index] = _copy_json(item, depth + 1, budget)
            index += 1  # noqa: SIM113  (see above)
        return copied
    if kind is float and math.isfinite(value):
        return value
    if kind in _ATOMS:
        return value
    raise _Doubt
