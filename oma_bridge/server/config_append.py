"""Add an ``[agents.NAME]`` table, or ``[server]`` keys, to the user's config, every byte kept.

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

``[server]`` keys (``oma-bridge tls init``) go right under the file's
``[server]`` header, and the file is rewritten in place (same inode, mode
and owner); a file without one gets a ``[server]`` table appended.
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

__all__ = [
    "NEW_CONFIG",
    "ConfigAppendError",
    "add_server_keys",
    "append_agent_profile",
    "toml_key",
    "toml_string",
]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
#: The ``[server]`` header line (a comment may follow it).
_SERVER_HEADER = re.compile(r"^[ \t]*\[[ \t]*server[ \t]*\][ \t]*(#.*)?$", re.MULTILINE)


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
    text, new, before = _read(path, new_text)
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


def _read(path: Path, new_text: str) -> tuple[str, bool, dict[str, Any]]:
    """The config's text, whether it is new (``new_text``: no file yet), and its table."""
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
    return text, new, before


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


def add_server_keys(
    path: Path, keys: Mapping[str, str], *, new_text: str = NEW_CONFIG
) -> list[str]:
    """Put the string ``keys`` in ``[server]`` of the config at ``path``; the lines added.

    A key that has that value already is left alone (an empty list: nothing
    to do).  Raises :class:`ConfigAppendError` when a key has another value
    (the user's own: it is not overwritten) or the layout would not take the
    lines (an inline or dotted ``server``), and
    :class:`~oma_bridge.server.config.ConfigError` when the result is a config
    the daemon would refuse; nothing is written then.
    """
    text, new, before = _read(path, new_text)
    server = before.get("server", {})
    server = server if isinstance(server, dict) else {}
    for key, value in keys.items():
        if key in server and server[key] != value:
            raise ConfigAppendError(
                f"{path}: [server] {key} is set already, to another file; "
                "it is left as it is: replace it by hand"
            )
    missing = {key: value for key, value in keys.items() if key not in server}
    lines = [f"{toml_key(key)} = {toml_string(value)}" for key, value in missing.items()]
    if not lines:
        return []
    header = _SERVER_HEADER.search(text)
    if header is not None:
        at = header.end() + 1 if header.end() < len(text) else len(text)
        prefix = text[:at] if text[:at].endswith("\n") else text[:at] + "\n"
        edited = prefix + "\n".join(lines) + "\n" + text[at:]
    else:
        separator = "" if not text or text.endswith("\n") else "\n"
        blank = "\n" if text.strip() else ""
        edited = text + separator + blank + "[server]\n" + "\n".join(lines) + "\n"
    expected = {**before, "server": {**server, **missing}}
    try:
        after = tomllib.loads(edited)
    except tomllib.TOMLDecodeError:
        after = None
    if after != expected:
        raise ConfigAppendError(
            f"{path}: its layout is one the [server] lines would not follow "
            "(an inline or dotted server table?): add them by hand"
        )
    parse_config(edited, source=str(path), base_dir=path.resolve().parent)
    if new or header is None:
        _append(path, edited if new else edited[len(text) :], new=new)
    else:
        _rewrite(path, edited)
    return lines


def _rewrite(path: Path, text: str) -> None:
    # The same file (a symlink's target, its inode, mode and owner), truncated
    # and written in one go once the text has passed every check.
    with path.open("r+", encoding="utf-8") as file:
        file.truncate(0)
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
