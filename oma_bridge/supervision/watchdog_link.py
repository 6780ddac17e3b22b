"""Our end of the crash watchdog (``watchdog.py``): :class:`WatchdogLink`.

The supervisor starts one watchdog process per supervising process and
tells it each process group it spawns (``+pgid``) and each that ended
(``-pgid``) over a pipe whose only write end is ours; when we die, the
watchdog reads end-of-file and ends every registered group.  Writes never
block the event loop: what the pipe does not take waits for the next one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from pathlib import Path

from oma_bridge.private_files import make_private_folder, open_private
from oma_bridge.supervision import watchdog as _watchdog

__all__ = ["WatchdogLink"]

#: The supervisor's logger, as before this moved out of supervisor.py.
logger = logging.getLogger("oma_bridge.supervision.supervisor")

#: Registrations the watchdog has not read yet, kept past this: dropped.
_MAX_PENDING = 1024 * 1024


class WatchdogLink:
    """Our end of the crash watchdog: start it, feed it ``+pgid`` / ``-pgid``."""

    def __init__(self, owner: str, state_dir: Path | None) -> None:
        self._owner = owner
        self._state_dir = state_dir
        self._process: subprocess.Popen[bytes] | None = None
        self._fd = -1
        self._live: set[int] = set()
        self._pending = b""

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def _start(self) -> None:
        if self._process is not None:  # a dead predecessor: reap it, drop its pipe
            self._process.poll()
            with contextlib.suppress(OSError):
                assert self._process.stdin is not None
                self._process.stdin.close()
            self._process = None
        state = self._create_state_file()
        arguments = [self._owner, str(state[0]), str(state[1])] if state else [self._owner]
        try:
            # -I -S: no site-packages, no user paths; the watchdog needs only the stdlib.
            process = subprocess.Popen(
                [sys.executable, "-I", "-S", _watchdog.__file__, *arguments],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                pass_fds=(state[1],) if state else (),
            )
        except OSError:
            # Children still carry the tag, and the next spawn tries again.
            logger.exception("could not start the supervisor watchdog")
            if state:
                with contextlib.suppress(OSError):
                    state[0].unlink()
            return
        finally:
            if state:
                os.close(state[1])  # the watchdog's now
        assert process.stdin is not None
        self._process = process
        self._fd = process.stdin.fileno()
        os.set_blocking(self._fd, False)
        self._pending = b""
        self._send(b"".join(b"+%d\n" % pgid for pgid in self._live), restart=False)

    def _create_state_file(self) -> tuple[Path, int] | None:
        """The crash record the watchdog keeps (path, descriptor), or ``None`` without one.

        Created here, 0600 in a private folder, and handed to the watchdog
        open: the watchdog is a standard-library script, and every file of
        the daemon's is created through ``private_files``.  A folder that is
        not private, or a full disk, leaves the watchdog without its record
        rather than without a watchdog.
        """
        if self._state_dir is None:
            return None
        path = self._state_dir / f"{self._owner}{_watchdog.STATE_SUFFIX}"
        try:
            make_private_folder(self._state_dir)
            return path, open_private(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
        except OSError as error:
            logger.warning("oma-bridge watchdog: no state file: %s", error)
            return None

    def register(self, pgid: int) -> None:
        self._live.add(pgid)
        if self._process is None:
            self._start()  # registers every live group, this one included
        else:
            lines, self._pending = self._pending + b"+%d\n" % pgid, b""
            self._send(lines)

    def unregister(self, pgid: int) -> None:
        # Sent with the next registration: one wake-up of the watchdog per run,
        # not two.  A stale entry is harmless: the watchdog checks the group
        # leader's start time before it kills anything.
        self._live.discard(pgid)
        self._pending += b"-%d\n" % pgid

    def _send(self, lines: bytes, *, restart: bool = True) -> None:
        """Write ``lines`` (the caller took them out of ``_pending``) without blocking."""
        if not lines or self._process is None:
            return
        try:
            written = os.write(self._fd, lines)
        except BlockingIOError:
            written = 0
        except OSError:
            logger.warning("supervisor watchdog died; starting a new one")
            if restart:
                self._start()
            return
        # The pipe is a byte stream: what did not fit goes first next time.
        self._pending = lines[written:]
        if len(self._pending) > _MAX_PENDING:
            # A watchdog that stopped reading; the tag still lets it find them.
            logger.warning("supervisor watchdog is not reading; registrations dropped")
            # Keep the end of a line cut by the write, so the stream stays aligned.
            self._pending = self._pending[: self._pending.find(b"\n") + 1]

    def close(self) -> None:
        """Stop the watchdog; it reaps whatever tagged process is left, then exits."""
        if self._process is None:
            return
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait()
        self._process = None
