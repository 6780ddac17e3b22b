"""What a remote ACP agent is reached with: its token and the CA its certificate is checked by.

Both are read at every connection (a token or a CA that is rotated, as a
Kubernetes Secret is, is picked up by the next one), and by the daemon once
at start, so that a config that cannot work is refused with one line naming
the key before any run (``server/remote_profiles.py``).

The token file is a secret of the user's: it is opened without following a
symlink and checked on the open descriptor by
:func:`~oma_bridge.private_files.open_checked` (a regular file of this user,
no bit for group or others), as the daemon's own ``token_file`` is.  Its
content, stripped, is the token; the token is never part of a message.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path

from oma_bridge.private_files import open_checked

__all__ = ["CredentialError", "read_token_file", "remote_ssl_context"]

MINIMUM_TLS_VERSION = ssl.TLSVersion.TLSv1_2


class CredentialError(ValueError):
    """A token file or a CA file that cannot be used; the text names the file and why."""


def read_token_file(path: Path) -> str:
    """The token in ``path`` (0600, this user's): its content with the surrounding
    whitespace stripped, printable ASCII."""
    try:
        fd = open_checked(path)
    except OSError as exc:  # NotPrivateError says which rule the file breaks
        raise CredentialError(str(exc) if exc.filename is None else _why(path, exc)) from None
    try:
        with os.fdopen(fd, "rb", closefd=False) as file:
            raw = file.read(64 * 1024)
    finally:
        os.close(fd)
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise CredentialError(f"{path}: the token must be ASCII") from None
    if not token:
        raise CredentialError(f"{path} is empty")
    if not all("!" <= char <= "~" for char in token):
        raise CredentialError(f"{path}: the token must not contain spaces or control characters")
    return token


def remote_ssl_context(ca_file: Path | None) -> ssl.SSLContext:
    """TLS 1.2 or later; the remote's certificate verified (by ``ca_file``, else the
    system's CAs) and required to name the URL's host."""
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except ssl.SSLError:
        raise CredentialError(f"{ca_file} holds no PEM certificate") from None
    except OSError as exc:
        raise CredentialError(_why(ca_file, exc)) from None
    context.minimum_version = MINIMUM_TLS_VERSION
    return context


def _why(path: Path | None, exc: OSError) -> str:
    return f"cannot read {path}: {exc.strerror or exc}"
