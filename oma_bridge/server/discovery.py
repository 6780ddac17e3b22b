"""The discovery file ``bridge.json``: how local clients find the daemon and its token.

It lives in the socket's folder (also when there is no socket), mode 0600,
and is written only after every listener is bound, atomically: a temp file
in the same folder, ``fsync``, then ``rename``.  A reader therefore sees the
old file, the new one, or none, never a partial one; when the disk is full
the temp file is removed and the start fails with a clear error.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

import orjson

from oma_bridge._version import __version__
from oma_bridge.paths import DISCOVERY_NAME
from oma_bridge.private_files import open_private
from oma_bridge.server.listeners import StartupError
from oma_bridge.wire.codes import PROTOCOL_VERSION, Discovery

__all__ = ["discovery_path", "remove_discovery", "write_discovery"]


def discovery_path(folder: Path) -> Path:
    return folder / DISCOVERY_NAME


def write_discovery(folder: Path, *, socket: Path | None, url: str | None, token: str) -> Path:
    """Write ``bridge.json`` into ``folder`` atomically, mode 0600; returns its path."""
    content: Discovery = {
        "pid": os.getpid(),
        "version": __version__,
        "protocolVersion": PROTOCOL_VERSION,
        "socket": str(socket) if socket is not None else None,
        "url": url,
        "token": token,
    }
    data = orjson.dumps(content, option=orjson.OPT_INDENT_2) + b"\n"
    target = discovery_path(folder)
    temp = folder / f".bridge-{secrets.token_hex(8)}.json.tmp"
    try:
        fd = open_private(temp, os.O_WRONLY | os.O_EXCL)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        temp.replace(target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise StartupError(
            f"cannot write the discovery file {target}: {exc.strerror or exc}"
        ) from None
    return target


def remove_discovery(path: Path) -> None:
    """Remove the discovery file if it is still ours (a later daemon may own it now)."""
    try:
        raw = path.read_bytes()
        if orjson.loads(raw).get("pid") != os.getpid():
            return
        path.unlink()
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return
