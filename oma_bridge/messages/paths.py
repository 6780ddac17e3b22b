"""How the guard and the copy name a place in a message list (JavaScript-style paths)."""

from __future__ import annotations

import re

_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")


def key_segment(key: object) -> str:
    if isinstance(key, str) and _IDENTIFIER.match(key):
        return "." + key
    if isinstance(key, int):
        return f"[{key}]"
    return "[" + json_quote(str(key)) + "]"


def json_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
