"""A check of JSON values against the registry's JSON Schemas (the part of draft-07 they use).

Why not a JSON Schema library: the two schemas use a dozen keywords, and
the command line that reads the registry must start fast with the
dependencies it has.  So this checks exactly those keywords, and a schema
that uses any other (a later registry's, say) is refused outright
(:class:`SchemaError`) rather than half-checked: an entry that a rule we
skipped would refuse never passes for valid.  ``format`` is an annotation
in draft-07 and is not checked; ``$schema``, ``$id``, ``title`` and
``description`` say nothing about the value.

A problem is reported with the JSON path of the value it is about, e.g.
``$.agents[3].distribution.npx.package: must be at least 1 character``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["Problem", "SchemaError", "check", "json_path"]

_ANNOTATIONS = frozenset({"$schema", "$id", "title", "description", "format", "definitions"})
_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda value: isinstance(value, dict),
    "array": lambda value: isinstance(value, list),
    "string": lambda value: isinstance(value, str),
    "boolean": lambda value: isinstance(value, bool),
    "number": lambda value: isinstance(value, int | float) and not isinstance(value, bool),
    "integer": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "null": lambda value: value is None,
}


class SchemaError(Exception):
    """The schema itself uses what this check does not know; the message names it."""


#: ``(path, problem)``: a JSON path (``$.agents[0].id``) and what is wrong there.
Problem = tuple[str, str]


def json_path(base: str, key: str | int) -> str:
    """``base`` followed by one step: ``[3]`` for an index, ``.name`` (or ``["a b"]``) for a key."""
    if isinstance(key, int):
        return f"{base}[{key}]"
    if re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$-]*", key):
        return f"{base}.{key}"
    return f'{base}["{key}"]'


def check(
    value: Any,
    schema: Mapping[str, Any],
    *,
    path: str = "$",
    schemas: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Problem]:
    """Every problem of ``value`` under ``schema`` (empty: it conforms).

    ``schemas`` resolves a ``$ref`` to another document by its file name
    (``registry.schema.json`` refers to ``agent.schema.json``); a local
    ``#/definitions/x`` is resolved in the document that holds it.
    """
    return list(_Checker(schemas or {}).problems(value, schema, schema, path))


class _Checker:
    def __init__(self, schemas: Mapping[str, Mapping[str, Any]]) -> None:
        self._schemas = schemas

    def problems(
        self, value: Any, schema: Mapping[str, Any], document: Mapping[str, Any], path: str
    ) -> Iterator[Problem]:
        unknown = set(schema) - _KEYWORDS - _ANNOTATIONS
        if unknown:
            raise SchemaError(f"the schema uses keywords not checked here: {sorted(unknown)}")
        if "$ref" in schema:
            target, in_document = self._resolve(schema["$ref"], document)
            yield from self.problems(value, target, in_document, path)
            return
        if "type" in schema:
            kind = schema["type"]
            if kind not in _TYPES:
                raise SchemaError(f"unknown type {kind!r}")
            if not _TYPES[kind](value):
                yield path, f"must be {'an' if kind[0] in 'aeio' else 'a'} {kind}"
                return
        for keyword, rule in _RULES.items():
            if keyword in schema:
                yield from rule(self, value, schema, document, path)

    def _resolve(
        self, ref: str, document: Mapping[str, Any]
    ) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
        name, _, pointer = ref.partition("#")
        if name:
            if name not in self._schemas:
                raise SchemaError(f"$ref to an unknown document: {ref}")
            document = self._schemas[name]
        target: Any = document
        for part in filter(None, pointer.split("/")):
            if not isinstance(target, Mapping) or part not in target:
                raise SchemaError(f"$ref to nothing: {ref}")
            target = target[part]
        if not isinstance(target, Mapping):
            raise SchemaError(f"$ref to no schema: {ref}")
        return target, document


_Rule = Callable[[_Checker, Any, Mapping[str, Any], Mapping[str, Any], str], Iterator[Problem]]


def _required(
    checker: _Checker, value: Any, schema: Mapping[str, Any], doc: Mapping[str, Any], path: str
) -> Iterator[Problem]:
    if isinstance(value, dict):
        for key in schema["required"]:
            if key not in value:
                yield json_path(path, key), "is required"


def _properties(
    checker: _Checker, value: Any, schema: Mapping[str, Any], doc: Mapping[str, Any], path: str
) -> Iterator[Problem]:
    if isinstance(value, dict):
        for key, sub in schema["properties"].items():
            if key in value:
                yield from checker.problems(value[key], sub, doc, json_path(path, key))


def _additional(
    checker: _Checker, value: Any, schema: Mapping[str, Any], doc: Mapping[str, Any], path: str
) -> Iterator[Problem]:
    if not isinstance(value, dict):
        return
    rule = schema["additionalProperties"]
    declared = schema.get("properties", {})
    for key in value:
        if key in declared:
            continue
        if rule is False:
            yield json_path(path, key), "is not a key this format has"
        elif isinstance(rule, Mapping):
            yield from checker.problems(value[key], rule, doc, json_path(path, key))


def _property_names(
    checker: _Checker, value: Any, schema: Mapping[str, Any], doc: Mapping[str, Any], path: str
) -> Iterator[Problem]:
    if isinstance(value, dict):
        for key in value:
            for _, problem in checker.problems(key, schema["propertyNames"], doc, path):
                yield json_path(path, key), f"the key {problem}"


def _min_properties(
    checker: _Checker, value: Any, schema: Mapping[str, Any], doc: Mapping[str, Any], path: str
) -> Iterator[Problem]:
    least = schema["minProperties"]
    if isinstance(value, dict) and len(value) < least:
        yield path, f"must have at least {least} key{'s' if least != 1 else ''}"


def _items(
    checker: _Checker, value: Any, schema: Mapping[str, Any], doc: Mapping[str, Any], path: str
) -> Iterator[Problem]:
    if isinstance(value, list):
        for index, item in enumerate(value):
            yield from checker.problems(item, schema["items"], doc, json_path(path, index))


def _pattern(
    checker: _Checker, value: Any, schema: Mapping[str, Any], doc: Mapping[str, Any], path: str
) -> Iterator[Problem]:
    # JSON Schema patterns are unanchored searches (ECMA 262), as re.search is.
    if isinstance(value, str) and re.search(schema["pattern"], value) is None:
        yield path, f"does not match {schema['pattern']}"


def _min_length(
    checker: _Checker, value: Any, schema: Mapping[str, Any], doc: Mapping[str, Any], path: str
) -> Iterator[Problem]:
    least = schema["minLength"]
    if isinstance(value, str) and len(value) < least:
        yield path, f"must be at least {least} character{'s' if least != 1 else ''}"


def _enum(
    checker: _Checker, value: Any, schema: Mapping[str, Any], doc: Mapping[str, Any], path: str
) -> Iterator[Problem]:
    if value not in schema["enum"]:
        yield path, "must be one of " + ", ".join(repr(choice) for choice in schema["enum"])


_RULES: dict[str, _Rule] = {
    "required": _required,
    "properties": _properties,
    "additionalProperties": _additional,
    "propertyNames": _property_names,
    "minProperties": _min_properties,
    "items": _items,
    "pattern": _pattern,
    "minLength": _min_length,
    "enum": _enum,
}
#: Every keyword checked: the rules, and the two read before them.
_KEYWORDS = frozenset({"$ref", "type", *_RULES})
