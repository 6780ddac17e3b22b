"""The files the daemon reads a secret from: ``token_file`` and ``tls_key``.

Each is opened and checked by :func:`oma_bridge.private_files.open_checked`:
a regular file of the daemon's own user with no permission bit for group or
others (0600 or 0400), checked on the open descriptor.  A file others can
read is a secret already shared, and the daemon refuses to start rather
than use it; the refusal is a config error about the key that named it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from oma_bridge.private_files import NotPrivateError, open_checked
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
        fd = open_checked(path)
    except NotPrivateError as exc:
        raise config.error(key, str(exc)) from None
    except OSError as exc:
        raise config.error(key, f"cannot open {path}: {exc.strerror}") from None
    try:
        yield fd
    finally:
        os.close(fd)
