"""``fs/read_text_file`` and ``fs/write_text_file``, confined to the agent's cwd.

Paths are resolved with ``realpath`` (symlinks and ``..`` included) before the
check, so neither can leave the directory (docs/contract.md §11.13).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

from oma_bridge.errors import WireError
from oma_bridge.observe import report
from oma_bridge.rpc.codes import INVALID_PARAMS, RESOURCE_NOT_FOUND

__all__ = [
    "OUTSIDE_CWD",
    "confine",
    "read_text_file",
    "write_text_file",
    "written_content",
]

OUTSIDE_CWD = "path is outside the agent's working directory"


def confine(root: Path, raw: object, who: Mapping[str, str] | None = None) -> Path:
    """The real path of ``raw`` if it lies inside ``root`` (itself a real path).

    A refusal is reported (``fs_denied``) to the observers, with ``who``.
    """
    if not isinstance(raw, str) or not raw:
        raise WireError(INVALID_PARAMS, "path must be a non-empty string")
    if "\0" in raw:  # no file has one; realpath would raise on it
        raise WireError(INVALID_PARAMS, f"path must not contain a NUL byte: {raw!r}")
    if not Path(raw).is_absolute():
        raise WireError(INVALID_PARAMS, f"path must be absolute: {raw}")
    real = Path(os.path.realpath(raw))
    if real != root and root not in real.parents:
        report("fs_denied", path=str(real), reason=OUTSIDE_CWD, **(who or {}))
        raise WireError(RESOURCE_NOT_FOUND, OUTSIDE_CWD, {"path": raw})
    return real


def _positive(params: dict[str, Any], name: str) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise WireError(INVALID_PARAMS, f"{name} must be a positive integer")
    return value


async def read_text_file(
    root: Path, params: dict[str, Any], who: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``{path, line?, limit?}`` -> ``{content}``; ``line`` is 1-based, ``limit`` counts lines."""
    path = confine(root, params.get("path"), who)
    line, limit = _positive(params, "line"), _positive(params, "limit")
    try:
        text = await anyio.Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise WireError(RESOURCE_NOT_FOUND, f"file not found: {params['path']}") from None
    except IsADirectoryError:
        raise WireError(INVALID_PARAMS, f"not a file: {params['path']}") from None
    if line is not None or limit is not None:
        lines = text.splitlines(keepends=True)
        start = (line or 1) - 1
        end = None if limit is None else start + limit
        text = "".join(lines[start:end])
    return {"content": text}


async def write_text_file(
    root: Path, params: dict[str, Any], who: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``{path, content}`` -> ``{}``; a missing file is created, a missing folder is not.

    A write is reported (``fs_write``, the resolved path and its size) to the observers.
    """
    path = confine(root, params.get("path"), who)
    content = written_content(params)
    try:
        await anyio.Path(path).write_text(content, encoding="utf-8")
    except FileNotFoundError:
        raise WireError(RESOURCE_NOT_FOUND, f"folder not found for: {params['path']}") from None
    except IsADirectoryError:
        raise WireError(INVALID_PARAMS, f"not a file: {params['path']}") from None
    report(
        "fs_write", path=str(path), bytes=len(content.encode()), servedBy="daemon", **(who or {})
    )
    return {}


def written_content(params: dict[str, Any]) -> str:
    """The ``content`` of a ``fs/write_text_file``, which must be a string."""
    content = params.get("content")
    if not isinstance(content, str):
        raise WireError(INVALID_PARAMS, "content must be a string")
    return content
