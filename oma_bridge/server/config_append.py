"""Append an ``[agents.NAME]`` table to the user's config, every byte already there kept.

``oma-bridge agents add`` writes into a file the user edits by hand, with
its comments and layout: no TOML writer keeps those, so the table is added
as text at the end, and the file is written by appending (its inode, mode
and owner stay; a new file is created 0600 in a 0700 folder, as a copy of
the built-in config with the table after it).  Before
anything is written, the new text is parsed again: it must mean exactly the
old config plus the new table (a layout that would merge it elsewhere, such
as an inline ``agents = {...}``, is refused), and the whole config must be
one the daemon accepts (:func:`~oma_bridge.server.config.parse_config`),
so a profile the registry cannot start is never written.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oma_bridge.private_files import make_private_folder, open_private
from oma_bridge.server.config import parse_config
from oma_bridge.server.default_config import DEFAULT_CONFIG_TOML

__all__ = ["NEW_CONFIG", "ConfigAppendError", "append_agent_profile", "toml_key", "toml_string"]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


class ConfigAppendError(Exception):
    """The table cannot be added safely; the message says why."""


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value, ensure_ascii=False)


def toml_key(key: str) -> str:
    """``key`` bare when TOML allows it, else quoted."""
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def _table(name: str, keys: Mapping[str, str], comment: str) -> str:
    lines = [f"# {line}".rstrip() for line in comment.splitlines()]
    lines.append(f"[agents.{toml_key(name)}]")
    lines.extend(f"{key} = {toml_string(value)}" for key, value in keys.items())
    return "\n".join(lines) + "\n"


#: What a config made by the append starts with: the built-in one, so that
#: a daemon that read no file so far keeps the profiles it served once it
#: reads this one.
NEW_CONFIG = DEFAULT_CONFIG_TOML.replace(
    "# The embedded default config of oma-bridge.",
    "# Made by `oma-bridge agents add` from oma-bridge's built-in config.",
)


def append_agent_profile(
    path: Path,
    name: str,
    keys: Mapping[str, str],
    *,
    comment: str = "",
    new_text: str = NEW_CONFIG,
) -> None:
    """Add ``[agents.<name>]`` with the string ``keys`` at the end of the config at ``path``.

    A file that is not there is made with ``new_text`` (:data:`NEW_CONFIG`)
    before the table.

    Raises :class:`ConfigAppendError` (a profile of that name exists, the
    file is no TOML or has a layout the table cannot follow) or
    :class:`~oma_bridge.server.config.ConfigError` (the config with the
    table is one the daemon would refuse); nothing is written then.
    """
    new = False
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text, new = new_text, True
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigAppendError(f"{path}: cannot read it: {exc}") from None
    try:
        before: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigAppendError(f"{path}: not valid TOML: {exc}") from None
    agents = before.get("agents", {})
    if isinstance(agents, dict) and name in agents:
        raise ConfigAppendError(
            f"{path}: a profile named {name!r} exists already; choose another with --name"
        )
    separator = "" if not text or text.endswith("\n") else "\n"
    addition = separator + ("\n" if text.strip() else "") + _table(name, keys, comment)
    edited = text + addition
    expected = {**before, "agents": {**(agents if isinstance(agents, dict) else {}), name: keys}}
    try:
        after = tomllib.loads(edited)
    except tomllib.TOMLDecodeError:
        after = None
    if after != expected:
        raise ConfigAppendError(
            f"{path}: its layout is one a table appended at the end would not follow "
            "(an inline or dotted agents table?): add the profile by hand"
        )
    parse_config(edited, source=str(path), base_dir=path.resolve().parent)
    _append(path, edited if new else addition, new=new)


def _append(path: Path, text: str, *, new: bool) -> None:
    if new:
        make_private_folder(path.parent, forbidden=None)
        fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    else:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
