"""The defensive copy: an independent deep copy of JSON data, refusing anything else."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from oma_bridge.errors import InvalidMessageError
from oma_bridge.messages.paths import key_segment

__all__ = ["MAX_CONTAINERS", "MAX_NESTING_DEPTH", "copy_messages"]

_ARRAY = (list, tuple)

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
        return "messages" + "".join(key_segment(s) for s in segments)
    head = "".join(key_segment(s) for s in segments[:12])
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
