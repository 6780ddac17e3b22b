"""The crash watchdog and the leftover reaper: what ends children of a dead daemon.

This file runs two ways, and so imports nothing but the standard library:

* as a **script** (``python -I -S watchdog.py <owner> [<state file> <fd>]``),
  the watchdog: one small process per supervising process, started once.  It
  reads ``+<pgid>`` / ``-<pgid>`` lines on stdin as the supervisor starts and
  reaps process groups.  When stdin reaches end of file (the supervisor has
  died, however it died: its pipe's only write end closes with it) it
  SIGKILLs every registered group and every process tagged with the owner
  (see below), removes its state file and exits.  The supervisor creates
  the state file (0600, in a private folder) and hands it over open, as
  descriptor ``<fd>``.
* as a **module**, imported by :mod:`oma_bridge.supervision.supervisor` for
  :func:`kill_tagged` and :func:`parse_record` (a :class:`CrashRecord`),
  used at start-up to reap what an earlier daemon left behind when its
  watchdog died with it (``reap_leftovers``, which decides first whether
  the file can be trusted).

The tag: every supervised child gets ``OMA_BRIDGE_SUPERVISOR_TAG=<owner>.<n>``
in its environment, which its descendants inherit, including the ones that
leave its process group or double-fork away from its tree.  Scanning
``/proc/<pid>/environ`` for the owner finds them all; each is checked and
signalled through a pidfd, so a recycled pid is never hit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import string
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

TAG_VARIABLE = "OMA_BRIDGE_SUPERVISOR_TAG"
STATE_SUFFIX = ".state"
_STATE_MAGIC = "oma-bridge-supervisor 1"
# How long to let registrations gather between two reads (also the most a
# daemon's death can wait before we notice it).
_BATCH_S = 0.05
# A state file is compacted past this many lines (or four lines per live group).
_COMPACT_LINES = 4096


def _stat(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name, or ``None`` if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses.
    return data.rsplit(b")", 1)[1].split()


def start_time(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot, or ``None`` if gone."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None  # field 22


def _running(pid: int, started: int) -> bool:
    """Whether ``pid`` is still the process that started at ``started``, and not a zombie."""
    fields = _stat(pid)
    return fields is not None and fields[0] != b"Z" and int(fields[19]) == started


_TAG_PREFIX = f"{TAG_VARIABLE}=".encode()


def _other_pids() -> list[int]:
    me = os.getpid()
    names = os.listdir("/proc")  # noqa: PTH208 (names only, no Path objects)
    return [int(name) for name in names if name.isdigit() and int(name) != me]


def _tag_of(pid: int) -> str | None:
    """The tag in the environment of ``pid``, or ``None`` (untagged, gone, or not ours)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            data = environ.read()  # a zombie's is empty
    except OSError:
        return None
    if data.startswith(_TAG_PREFIX):
        start = len(_TAG_PREFIX)
    else:
        at = data.find(b"\0" + _TAG_PREFIX)
        if at < 0:
            return None
        start = at + 1 + len(_TAG_PREFIX)
    end = data.find(b"\0", start)
    return data[start : end if end >= 0 else None].decode(errors="replace")


def tagged(prefix: str) -> dict[int, str]:
    """``{pid: tag}`` of every process whose tag starts with ``prefix`` (a ``/proc`` scan)."""
    found: dict[int, str] = {}
    for pid in _other_pids():
        tag = _tag_of(pid)
        if tag is not None and tag.startswith(prefix):
            found[pid] = tag
    return found


def kill_tagged(tag: str, *, exact: bool = False) -> int:
    """SIGKILL every process whose environment carries ``tag``.

    With ``exact`` the value must equal ``tag`` (one run); otherwise it must
    start with ``tag`` (every run of one owner).  Returns how many were hit.
    """
    hits = 0
    for pid in _other_pids():
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            # Read through the pid after the pidfd pins it: if the pid was
            # recycled in between, the signal below goes to the pinned
            # process, whose environment this is.
            found = _tag_of(pid)
            if found is not None and (found == tag if exact else found.startswith(tag)):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                hits += 1
        except OSError:
            pass
        finally:
            os.close(pidfd)
    return hits


def kill_groups(groups: Iterable[tuple[int, int]]) -> None:
    """SIGKILL each ``(pgid, leader start time)`` whose leader is still that process."""
    for pgid, started in groups:
        if start_time(pgid) == started:
            with contextlib.suppress(OSError):
                os.killpg(pgid, signal.SIGKILL)


def kill_tagged_groups(groups: Iterable[tuple[int, int]], owner: str) -> list[int]:
    """SIGKILL each group whose leader is still the recorded process and carries ``owner``'s tag.

    For a record read back from disk: a group id is killed only if its
    leader has the recorded start time *and* the owner's tag, so a record
    naming someone else's group (or a group whose leader has become another
    program's) harms nothing.  Returns the ids of the groups left alone
    because their leader lives untagged.
    """
    untagged = []
    for pgid, started in groups:
        if start_time(pgid) != started:
            continue  # gone, or a recycled pid
        tag = _tag_of(pgid)
        if tag is None or not tag.startswith(owner + "."):
            untagged.append(pgid)
            continue
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
    return untagged


def _kill_tagged_until_none(owner: str) -> None:
    """A few rounds, because a tagged process may fork between the scan that
    missed its child and the signal that ended it."""
    for _ in range(5):
        if not kill_tagged(owner + "."):
            return
        time.sleep(0.05)


def reap_everything(owner: str, groups: Iterable[tuple[int, int]]) -> None:
    """The watchdog's last act: kill the registered groups, then every tagged process.

    The groups came down the supervisor's own pipe, so the leader's start
    time is the only check (a leader may have cleared its environment).
    """
    kill_groups(groups)
    _kill_tagged_until_none(owner)


class CrashRecord(NamedTuple):
    """A state file read back: whose it was, its watchdog, the groups it had live."""

    owner: str
    #: The watchdog's pid and start time.
    watchdog: tuple[int, int]
    #: ``{pgid: leader start time}``.
    groups: dict[int, int]

    def watchdog_alive(self) -> bool:
        """Whether its watchdog still runs: then it belongs to a live daemon."""
        return _running(*self.watchdog)

    def reap(self) -> list[int]:
        """End what its dead daemon left: :func:`kill_tagged_groups`, then every tagged
        process; returns the groups left alone because untagged."""
        untagged = kill_tagged_groups(self.groups.items(), self.owner)
        _kill_tagged_until_none(self.owner)
        return untagged


def parse_record(text: str, path: Path) -> CrashRecord:
    """The :class:`CrashRecord` that ``text`` (the content of ``path``) holds.

    :class:`ValueError` naming ``path`` unless it is one: the header, an
    owner of the supervisor's shape (16 hex digits) that the file is named
    after, and ``+pgid start`` / ``-pgid`` lines.
    """
    lines = text.splitlines()
    if len(lines) < 3 or lines[0] != _STATE_MAGIC:
        raise ValueError(f"{path} is not a supervisor state file")
    owner = lines[1].removeprefix("owner ")
    if not (len(owner) == 16 and all(char in string.hexdigits for char in owner)):
        raise ValueError(f"{path} names no supervisor owner")
    if path.name != owner + STATE_SUFFIX:
        raise ValueError(f"{path} records the owner {owner}, not the one it is named after")
    try:
        pid, started = (int(part) for part in lines[2].removeprefix("watchdog ").split())
        groups: dict[int, int] = {}
        for line in lines[3:]:
            if line.startswith("+"):
                pgid, pgid_started = (int(part) for part in line[1:].split())
                groups[pgid] = pgid_started
            elif line.startswith("-"):
                groups.pop(int(line[1:]), None)
    except ValueError:
        raise ValueError(f"{path} is not a supervisor state file") from None
    return CrashRecord(owner, (pid, started), groups)


class _StateFile:
    """The append-only log of live groups that ``reap_leftovers`` replays."""

    def __init__(self, path: Path, fd: int, owner: str) -> None:
        self._path = path
        self._header = f"{_STATE_MAGIC}\nowner {owner}\nwatchdog {os.getpid()} "
        self._header += f"{start_time(os.getpid())}\n"
        self._file = os.fdopen(fd, "w")
        try:
            self._file.write(self._header)
            self._file.flush()
        except OSError:
            # No room for even the header (a full disk): leave no empty file
            # behind, since the next start could not read it.
            with contextlib.suppress(OSError):
                self._file.close()
            with contextlib.suppress(OSError):
                path.unlink()
            raise
        self._lines = 0

    def append(self, line: str, groups: dict[int, int]) -> None:
        if self._lines >= max(_COMPACT_LINES, 4 * len(groups)):
            # Rewrite in place: the header and the live groups only.
            self._file.seek(0)
            self._file.truncate()
            live = "".join(f"+{pgid} {started}\n" for pgid, started in groups.items())
            self._file.write(self._header + live)
            self._lines = len(groups)
            return
        self._file.write(line)
        self._lines += 1

    def flush(self) -> None:
        """One write per batch; no fsync: a crash of the machine ends every child too."""
        self._file.flush()

    def remove(self) -> None:
        self._file.close()
        with contextlib.suppress(OSError):
            self._path.unlink()


def main(argv: list[str]) -> None:
    owner = argv[1]
    state = None
    if len(argv) > 3:
        try:
            state = _StateFile(Path(argv[2]), int(argv[3]), owner)
        except OSError as error:  # guard without the file rather than not at all
            print(f"oma-bridge watchdog: no state file: {error}", file=sys.stderr)
    # The terminal's signals are not for us (we run in our own session anyway).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    groups: dict[int, int] = {}
    pending = b""
    while chunk := os.read(0, 65536):
        *lines, pending = (pending + chunk).split(b"\n")
        for raw in lines:
            try:
                pgid = int(raw[1:])
            except ValueError:
                continue  # not ours to die of: a malformed line
            if raw.startswith(b"+"):
                started = start_time(pgid)
                if started is None:
                    continue  # already gone: nothing to remember
                groups[pgid] = started
                if state:
                    state.append(f"+{pgid} {started}\n", groups)
            elif groups.pop(pgid, None) is not None and state:
                state.append(f"-{pgid}\n", groups)
        if state:
            state.flush()
        # Let registrations pile up in the pipe for a moment: one wake-up per
        # batch rather than per run keeps us off a busy daemon's CPUs.
        time.sleep(_BATCH_S)
    reap_everything(owner, groups.items())
    if state:
        state.remove()


if __name__ == "__main__":
    main(sys.argv)
