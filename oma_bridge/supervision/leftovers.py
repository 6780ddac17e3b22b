"""What earlier daemons left behind: :func:`reap_leftovers`.

A daemon's crash watchdog keeps a record of the live process groups in the
state folder; when both died (the machine froze, a SIGKILL of the whole
session), the next start reads the records and ends what was left
(``docs/processes.md``).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from oma_bridge.private_files import NotPrivateError, check_private, open_checked
from oma_bridge.supervision import watchdog as _watchdog

__all__ = ["reap_leftovers"]

#: The supervisor's logger, as before this moved out of supervisor.py.
logger = logging.getLogger("oma_bridge.supervision.supervisor")


def reap_leftovers(state_dir: Path) -> int:
    """End the children of earlier daemons that died with their watchdog.

    Reads every state file in ``state_dir`` whose watchdog is gone, SIGKILLs
    the groups it lists whose leader still has the recorded start time and
    carries that daemon's tag, and every process carrying the tag, and
    deletes the file.  Returns the number of state files reaped.  Blocking
    (a ``/proc`` scan): call it at start-up, before serving.

    A record is believed only if nobody else could have written it
    (docs/security.md): the folder must be the user's and writable by nobody
    else, the file a regular file of the user's, writable by nobody else,
    and named after the owner it records.  Anything else is skipped with a
    warning naming it, and so is a listed group whose leader lives untagged.
    """
    if not state_dir.is_dir():
        return 0
    try:
        check_private(state_dir.stat(), state_dir, folder=True, forbidden=_WRITABLE_BY_OTHERS)
    except NotPrivateError as error:
        logger.warning("skipped the crash records of a state folder others can write: %s", error)
        return 0
    reaped = 0
    for path in sorted(state_dir.glob("*" + _watchdog.STATE_SUFFIX)):
        record = _trusted_record(path)
        if record is None or record.watchdog_alive():
            continue
        for pgid in record.reap():
            logger.warning(
                "crash record %s: process group %d does not carry its daemon's tag; left alone",
                path,
                pgid,
            )
        with contextlib.suppress(OSError):
            path.unlink()
        reaped += 1
    return reaped


#: What a crash record and its folder must not have: write access for group or others.
_WRITABLE_BY_OTHERS = 0o022


def _trusted_record(path: Path) -> _watchdog.CrashRecord | None:
    """The record in ``path`` if it can be trusted and read, else ``None`` (and a warning)."""
    try:
        fd = open_checked(path, forbidden=_WRITABLE_BY_OTHERS)
        with os.fdopen(fd, encoding="utf-8", errors="replace") as file:
            text = file.read()
        return _watchdog.parse_record(text, path)
    except (OSError, ValueError) as error:
        logger.warning("skipped a crash record: %s", error)
        return None
