"""A config value of the wrong type, said in TOML's words (PROTOCOL §18.3).

pydantic says ``Input should be a valid tuple``; who wrote ``args = "-w"``
needs ``agents.wc.args: expected a list of strings, got a string``.  The
expected type comes from the error's type and, for a list, from the
model's annotation of the key (``tuple[str, ...]``: strings); the given one
from the value's TOML type alone, never the value (it may be a secret).
"""

from __future__ import annotations

import datetime
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

__all__ = ["type_problem"]

#: pydantic's error type -> what TOML value was expected.
_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
    "tuple_type": "a list",
    "list_type": "a list",
    "set_type": "a list",
    "frozen_set_type": "a list",
}

#: An element type -> its plural in a list: "a list of strings".
_PLURALS: dict[Any, str] = {
    str: "strings",
    Path: "paths (strings)",
    int: "integers",
    float: "numbers",
    bool: "booleans",
}


def toml_type(value: object) -> str:
    """The TOML name of ``value``'s type: ``a string``, ``a list``, ``a table``..."""
    if isinstance(value, bool):  # before int, which it is
        return "a boolean"
    for kind, name in (
        (str, "a string"),
        (int, "an integer"),
        (float, "a float"),
        (list, "a list"),
        (dict, "a table"),
        (datetime.datetime, "a date-time"),
        (datetime.date, "a date"),
        (datetime.time, "a time"),
    ):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def type_problem(error: Any, root: type[BaseModel]) -> str | None:
    """``expected a list of strings, got a string`` for a pydantic type error, else ``None``.

    ``error`` is one item of ``ValidationError.errors()`` with its input;
    ``root`` the model its ``loc`` starts from.
    """
    expected = _EXPECTED.get(error["type"])
    if expected is None:
        return None
    if expected == "a list":
        element = _list_element(_annotation_at(root, tuple(error["loc"])))
        if element in _PLURALS:
            expected = f"a list of {_PLURALS[element]}"
    if "input" not in error:
        return f"expected {expected}"
    return f"expected {expected}, got {toml_type(error['input'])}"


def _plain(annotation: Any) -> Any:
    """``annotation`` without ``Annotated`` and an optional ``None``."""
    while get_origin(annotation) is typing.Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(members) == 1:
            return _plain(members[0])
    return annotation


def _annotation_at(root: type[BaseModel], loc: tuple[Any, ...]) -> Any:
    """The annotation of the key at ``loc`` (through tables, lists and tagged unions)."""
    current: Any = root
    for part in loc:
        current = _plain(current)
        origin = get_origin(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return None
            current = field.annotation
        elif origin is dict or origin is typing.Mapping:
            current = get_args(current)[1]  # ``part`` is a key of the table
        elif origin in (Union, types.UnionType):
            current = _tagged(current, part)  # ``part`` is the tag pydantic names
        elif origin in (list, tuple, set, frozenset):
            current = get_args(current)[0]
        else:
            return None
        if current is None:
            return None
    return current


def _tagged(union: Any, tag: object) -> Any:
    """The member of a tagged union whose ``kind`` is ``tag``."""
    for member in get_args(union):
        member = _plain(member)
        if isinstance(member, type) and issubclass(member, BaseModel):
            kind = member.model_fields.get("kind")
            tags = get_args(kind.annotation) if kind is not None else ()
            if kind is not None and get_origin(kind.annotation) is Literal and tag in tags:
                return member
    return None


def _list_element(annotation: Any) -> Any:
    annotation = _plain(annotation)
    if get_origin(annotation) in (list, tuple, set, frozenset):
        args = get_args(annotation)
        return _plain(args[0]) if args else None
    return None
