"""The files the daemon reads a secret from: ``token_file`` and ``tls_key``.

Each is opened once, without following a symlink, and checked on the open
descriptor, so that nothing can swap the file between the check and the
read: a regular file of the daemon's own user with no permission bit for
group or others (0600 or 0400).  A file others can read is a secret already
shared, and the daemon refuses to start rather than use it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from oma_bridge.server.config import ServerConfig

__all__ = ["open_private_file"]


@contextlib.contextmanager
def open_private_file(path: Path, config: ServerConfig, key: str) -> Iterator[int]:
    """The descriptor of ``path``, open for reading, once it passed the checks.

    Every problem is a :class:`~oma_bridge.server.config.ConfigError` about
    ``key`` (``server.token_file``, say) naming the file; its content never
    appears in a message.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise config.error(key, f"cannot open {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise config.error(key, f"{path} is not a regular file")
        if info.st_uid != os.getuid():
            raise config.error(key, f"{path} belongs to another user")
        if info.st_mode & 0o077:
            mode = stat.S_IMODE(info.st_mode)
            raise config.error(key, f"{path} has mode {mode:04o}; it must be 0600")
        yield fd
    finally:
        os.close(fd)
