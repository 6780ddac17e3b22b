"""The ``command_sha256`` check, made before every spawn of an ACP agent (PROTOCOL §22.1).

The file is read and hashed in a worker thread (an agent's binary may be
hundreds of megabytes), and a file that differs, or that cannot be read, is
not started: the run fails with a :class:`~oma_bridge.errors.BackendError`
that names the file, both digests and the key.  The file is then exec'd by
its path, so a file swapped between the check and the exec is not caught:
the check is against a download that went wrong or a file replaced at rest,
in a folder only its user can write to (docs/acp.md).
"""

from __future__ import annotations

import hashlib

import anyio.to_thread

from oma_bridge.errors import BackendError

__all__ = ["check_command_sha256", "sha256_of"]

_CHUNK = 1024 * 1024


def sha256_of(path: str) -> str:
    """The SHA-256 of the file at ``path``, in hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


async def check_command_sha256(command: str, expected: str, *, label: str) -> None:
    """Raise unless the file ``command`` has the SHA-256 ``expected``."""
    try:
        actual = await anyio.to_thread.run_sync(sha256_of, command)
    except OSError as exc:
        raise BackendError(
            f'ACP agent "{label}" was not started: its command {command} cannot be read to '
            f"check its sha256 ({exc.strerror or exc})"
        ) from None
    if actual != expected.lower():
        # The facts first: a run's status message keeps 256 characters.
        raise BackendError(
            f'ACP agent "{label}" was not started: {command} is not the file expected '
            f"(its sha256 is {actual}; command_sha256, or the registry entry's, is "
            f"{expected.lower()})"
        )
