"""Files and folders only the daemon's user can reach: created so, and checked so.

**Created private.**  A file is created by :func:`open_private` (``os.open``
with mode 0600), a folder by :func:`make_private_folder` (``mkdir`` with
mode 0700, each missing level of the path on its own, since ``mkdir -p``
gives the parents it makes the umask's mode).  The mode is given at
creation, so a file is never wider than private for an instant and nothing
is ``chmod``-ed after the fact; the umask can only take bits away, so
whatever it is (``000`` included) the result is readable and writable by
the daemon's user alone.  The process umask itself is left alone: it is
shared by every thread and inherited by every child, and the files an agent
writes in a workspace keep the user's usual permissions.

**Checked before use.**  :func:`check_private` says why a ``stat`` result
is not private enough (another user's, a mode that lets others in, not a
folder or not a regular file); a folder of the daemon's own that already
exists is checked so, and so is a file read as a secret or trusted as a
record, on its open descriptor (:func:`open_checked`: no symlink followed,
``fstat`` of what was opened, so the file checked is the file read).

The standard library only, and the lowest layer: the supervisor, the
orchestrator's evaluation store, the shim and the daemon all create through
here.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

__all__ = [
    "FILE_MODE",
    "FOLDER_MODE",
    "NOT_SHARED",
    "NotPrivateError",
    "check_private",
    "make_private_folder",
    "open_checked",
    "open_private",
]

#: The mode of every file the daemon creates.
FILE_MODE = 0o600
#: The mode of every folder the daemon creates.
FOLDER_MODE = 0o700
#: The bits a secret or a folder of the daemon's own must not have: any for group or others.
NOT_SHARED = 0o077


class NotPrivateError(OSError):
    """A file or folder that is another user's, or open to others: refused.

    An :class:`OSError`, so that whatever handles a file that cannot be used
    handles this one too; its text names the path and what is wrong.
    """


def open_private(path: Path | str, flags: int = os.O_WRONLY | os.O_APPEND) -> int:
    """``os.open`` of ``path`` with ``flags``; a file that is not there is created 0600.

    An existing file keeps its mode: the folder it lives in is what keeps
    others out (:func:`make_private_folder`).
    """
    return os.open(path, flags | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)


def make_private_folder(path: Path, *, forbidden: int | None = NOT_SHARED) -> None:
    """Create ``path`` 0700, and every missing folder above it 0700 too.

    An existing ``path`` must then pass :func:`check_private` with
    ``forbidden`` (else :class:`NotPrivateError`): by default it must be
    private, as every folder of the daemon's own is (the state folder, the
    runtime folder, the folders inside them).  ``0`` asks only for a folder
    of the daemon's user, whatever its mode (a socket folder the user named);
    ``None`` takes an existing folder as it is (one the user named above an
    evaluation store, say).  A symbolic link must be the user's own too: one
    of another user (in ``/tmp``, say) could be pointed elsewhere later.
    """
    missing: list[Path] = []
    level = path
    while not os.path.lexists(level) and level != level.parent:
        missing.append(level)
        level = level.parent
    for folder in reversed(missing):
        # Made meanwhile by someone else: the check below says whose.
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=FOLDER_MODE)
    if forbidden is None:
        return
    link = path.lstat()
    if stat.S_ISLNK(link.st_mode) and link.st_uid != os.getuid():
        raise NotPrivateError(f"{path} is a symbolic link of another user (uid {link.st_uid})")
    check_private(path.stat(), path, folder=True, forbidden=forbidden)


def check_private(
    info: os.stat_result, path: Path | str, *, folder: bool, forbidden: int = NOT_SHARED
) -> None:
    """Raise :class:`NotPrivateError` unless ``info`` (of ``path``) is private enough.

    It must be a folder (``folder``) or a regular file, belong to the
    daemon's user and have none of the ``forbidden`` mode bits (by default
    every bit for group and others; a crash record need only be writable by
    nobody else: ``0o022``).  The text names the path and, for a folder, the
    command that fixes its mode.
    """
    if folder and not stat.S_ISDIR(info.st_mode):
        raise NotPrivateError(f"{path} is not a folder")
    if not folder and not stat.S_ISREG(info.st_mode):
        raise NotPrivateError(f"{path} is not a regular file")
    if info.st_uid != os.getuid():
        raise NotPrivateError(f"{path} belongs to another user (uid {info.st_uid})")
    if info.st_mode & forbidden:
        mode = stat.S_IMODE(info.st_mode)
        if folder:
            raise NotPrivateError(f"{path} has mode {mode:04o}; it must be 0700: chmod 700 {path}")
        raise NotPrivateError(f"{path} has mode {mode:04o}; it must be 0600")


def open_checked(path: Path | str, *, forbidden: int = NOT_SHARED) -> int:
    """A read-only descriptor of the regular file ``path``, once it passed :func:`check_private`.

    No symlink is followed, and the check is made on the descriptor: nothing
    can swap the file between the check and the read.  The caller closes it.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        check_private(os.fstat(fd), path, folder=False, forbidden=forbidden)
    except BaseException:
        os.close(fd)
        raise
    return fd
