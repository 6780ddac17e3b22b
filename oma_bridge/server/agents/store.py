"""Sessions on disk: each agent's identity, overrides, history and journal, as JSON lines.

One file per agent, ``<state>/sessions/<agentId>.jsonl`` (folder 0700, files
0600), append-only:

* the first line is the header ``{"v": 1, "agentId", "profile", "overrides",
  "createdAt"}``;
* ``{"seq", "entry"}`` a journal entry; ``{"seq", "append"}`` text joined
  into entry ``seq``;
* ``{"history": [...]}`` the agent's history after a run (the last one wins);
* ``{"acpSession": id}`` the downstream ACP session, for its recovery;
* ``{"meta": {...}}`` what the ACP facade keeps of a session (its ``cwd``, ``title``).

The writes happen on one worker thread fed by a queue: a slow disk delays
the file, never a stream.  The worker wakes once per burst (it lets lines
gather for ``_GATHER_S``) and writes each file's new lines with one
``writev(2)`` on an ``O_APPEND`` file; the file is fsynced at each run's end.
An open agent holds no descriptor (PROTOCOL §23): the worker keeps the
files it wrote last open, at most :data:`MAX_OPEN_FILES`, and closes the
least recently written one to open another (a daemon with 5,000 agents
open needs no 5,000 descriptors for them).  A file the worker cannot open
for lack of descriptors (``EMFILE``, ``ENFILE``) is retried after it closes
every file it holds, and again for a moment; only then is persistence turned
off as for a full disk.
A write cut short (a full disk, a SIGKILL in the middle of a large write)
can leave an incomplete last line, which makes the file unreadable at the
next start (below): what a crash costs is that session, never the daemon.
A write that fails (a full disk) turns persistence off with one warning;
the daemon goes on in memory.  So does a disk that falls more than
:data:`MAX_BACKLOG_BYTES` behind the streams: what waits for the writer is
memory, and it stays bounded.  Either way a file keeps a prefix of its
session (nothing is written after the failure), which a restart reads.

:meth:`SessionStore.load` reads the folder at start; a file that does not
parse line by line (corrupt, truncated) is skipped with a warning naming it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import queue
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import orjson

from oma_bridge.private_files import make_private_folder, open_private

__all__ = ["PersistedSession", "SessionStore"]

logger = logging.getLogger("oma_bridge.server")

FORMAT_VERSION = 1
_SUFFIX = ".jsonl"
#: Stream text gathered per agent before it goes to the writer.
_BATCH_BYTES = 64 * 1024
#: How long the writer lets lines gather after a wake-up (see ``_work``).
_GATHER_S = 0.005
#: Buffers per ``writev`` (Linux's ``IOV_MAX``).
_IOV_MAX = 1024
#: Session files the writer keeps open at once (see the module docstring).
MAX_OPEN_FILES = 32
#: Attempts, and the pause between them, of an open that found no descriptor.
_OPEN_ATTEMPTS = 5
_OPEN_PAUSE_S = 0.05
#: Bytes handed to the writer and not written yet past which the disk counts
#: as failed (as a full one does): a disk slower than the streams for long
#: must not grow the daemon's memory without bound.
MAX_BACKLOG_BYTES = 32 * 1024 * 1024


@dataclass
class PersistedSession:
    """What a restart reads back of one agent."""

    agent_id: str
    profile: str
    overrides: dict[str, Any]
    created_at: float
    entries: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    history: list[Any] | None = None
    acp_session: str | None = None
    #: What the ACP facade keeps of a session (``cwd``, ``title``).
    meta: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None


_Op = tuple[str, str, bytes]


class SessionStore:
    """The sessions folder and its writer thread; see the module docstring."""

    def __init__(self, folder: Path | None) -> None:
        #: ``None``: persistence is off (``persist_sessions = false``, or it failed).
        self.folder = folder
        self._queue: queue.SimpleQueue[_Op | None] = queue.SimpleQueue()
        self._failed = False
        #: The agents with a session file (``daemon/status``'s ``sessions``):
        #: read at :meth:`load`, kept up to date by :meth:`create` and
        #: :meth:`remove`, so that a status poll never lists the folder.
        self._on_disk: set[str] = set()
        #: Batched lines not handed to the writer yet, per agent (see :meth:`write`).
        self._pending: dict[str, bytearray] = {}
        #: Bytes queued (counted by the loop) and written or dropped (by the
        #: writer): each counter has one writer thread, their difference is
        #: the backlog.
        self._queued_bytes = 0
        self._done_bytes = 0

    @property
    def enabled(self) -> bool:
        return self.folder is not None and not self._failed

    # -- the loop's side: cheap, never blocking ------------------------------

    def create(self, agent_id: str, profile: str, overrides: dict[str, Any]) -> None:
        header = {
            "v": FORMAT_VERSION,
            "agentId": agent_id,
            "profile": profile,
            "overrides": overrides,
            "createdAt": time.time(),
        }
        if not self.enabled:
            return
        self._on_disk.add(agent_id)
        self._put("create", agent_id, header)

    def write(self, agent_id: str, line: dict[str, Any], *, batch: bool = False) -> None:
        """Append ``line``; with ``batch`` (stream text) it may wait for the next line or sync.

        Batched lines go to the writer together, in one ``write(2)``, when
        ``_BATCH_BYTES`` have gathered or a line without ``batch`` (a run's
        start or end, an update) comes: a stream of small chunks costs the
        loop an append to a buffer, not a queue hop and a syscall each.
        """
        if not self.enabled:
            return
        data = orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE)
        pending = self._pending.get(agent_id)
        if pending is None:
            pending = self._pending[agent_id] = bytearray(data)
        else:
            pending += data
        if not batch or len(pending) >= _BATCH_BYTES:
            self._flush(agent_id)

    def sync(self, agent_id: str) -> None:
        if self.enabled:
            self._flush(agent_id)
            self._queue.put(("sync", agent_id, b""))

    def remove(self, agent_id: str) -> None:
        self._pending.pop(agent_id, None)
        if self.folder is not None:
            self._on_disk.discard(agent_id)
            self._queue.put(("remove", agent_id, b""))

    def _flush(self, agent_id: str) -> None:
        pending = self._pending.pop(agent_id, None)
        if pending:
            self._enqueue(("line", agent_id, bytes(pending)))

    def _put(self, kind: str, agent_id: str, line: dict[str, Any]) -> None:
        if self.enabled:
            self._flush(agent_id)
            data = orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE)
            # orjson (3.12 on) hands back bytes whose allocation is at least
            # 4 KiB, whatever their length: a queued header of ~100 bytes would
            # hold 40 times that while the writer catches up, and the backlog's
            # bound (counted in lengths) would not bound memory.  A copy is sized
            # to its length; ``write``'s lines are copied into their batch.
            self._enqueue((kind, agent_id, bytes(memoryview(data))))

    def _enqueue(self, op: _Op) -> None:
        self._queued_bytes += len(op[2])
        self._queue.put(op)
        behind = self._queued_bytes - self._done_bytes
        if behind > MAX_BACKLOG_BYTES and not self._failed:
            self._failed = True
            logger.warning(
                "session files in %s are %d MiB behind the streams (the disk is too slow): "
                "sessions stay in memory only",
                self.folder,
                behind // (1024 * 1024),
            )

    def count(self) -> int:
        """Session files on disk (``daemon/status``'s ``sessions``), as this store keeps count."""
        return len(self._on_disk)

    # -- the worker ----------------------------------------------------------

    async def run(self) -> None:
        """Write until :meth:`close` (or until cancelled); run it in the daemon's task group."""
        if self.folder is None:
            return

        async def close_when_cancelled() -> None:
            # The writer thread cannot be cancelled, and its task group would
            # wait for it forever: a cancelled run asks it to finish instead.
            try:
                await anyio.sleep_forever()
            finally:
                self.close()

        async with anyio.create_task_group() as tg:
            tg.start_soon(close_when_cancelled)
            await anyio.to_thread.run_sync(self._work)
            tg.cancel_scope.cancel()

    def close(self) -> None:
        """Finish what is queued (batched lines included), then stop the worker."""
        for agent_id in list(self._pending):
            self._flush(agent_id)
        self._queue.put(None)

    def _work(self) -> None:
        assert self.folder is not None
        files: OrderedDict[str, int] = OrderedDict()
        try:
            while True:
                batch = [self._queue.get()]
                if batch[0] is not None:
                    # Let the burst that woke us queue up: one wake-up and one
                    # write(2) per file for all of it, not one per entry.
                    time.sleep(_GATHER_S)
                    batch += _drain(self._queue)
                going_on = self._apply_batch(files, batch)
                self._done_bytes += sum(len(op[2]) for op in batch if op is not None)
                if not going_on:
                    return
        finally:
            for fd in files.values():
                _close_quietly(fd)

    def _apply_batch(self, files: OrderedDict[str, int], batch: list[_Op | None]) -> bool:
        """Apply ``batch`` in order, an agent's run of lines in one write; ``False`` at the end."""
        pending: dict[str, tuple[str, list[bytes]]] = {}

        def flush(agent_id: str) -> None:
            kind, chunks = pending.pop(agent_id, ("line", []))
            if chunks:
                self._guarded(files, kind, agent_id, chunks)

        for op in batch:
            if op is None:
                for agent_id in list(pending):
                    flush(agent_id)
                return False
            kind, agent_id, data = op
            if kind == "line" and agent_id in pending:
                pending[agent_id][1].append(data)
            elif kind in ("create", "line"):
                flush(agent_id)
                pending[agent_id] = (kind, [data])
            else:
                flush(agent_id)
                self._guarded(files, kind, agent_id, [])
        for agent_id in list(pending):
            flush(agent_id)
        return True

    def _guarded(
        self, files: OrderedDict[str, int], kind: str, agent_id: str, data: list[bytes]
    ) -> None:
        if self._failed and kind != "remove":
            return
        try:
            self._apply(files, kind, agent_id, data)
        except OSError as error:
            self._fail(error)

    def _apply(
        self, files: OrderedDict[str, int], kind: str, agent_id: str, data: list[bytes]
    ) -> None:
        assert self.folder is not None
        path = self.folder / f"{agent_id}{_SUFFIX}"
        if kind == "remove":
            fd = files.pop(agent_id, None)
            if fd is not None:
                _close_quietly(fd)
            path.unlink(missing_ok=True)
            return
        fd = files.get(agent_id)
        if fd is not None:
            files.move_to_end(agent_id)
        else:
            if kind != "create" and not path.exists():
                return  # removed meanwhile
            fd = _open_file(files, path)
            files[agent_id] = fd
        if kind == "sync":
            os.fsync(fd)
            return
        try:
            _write_all(fd, data)
        except OSError:
            if kind == "create":  # never leave a file without its header
                _close_quietly(files.pop(agent_id))
                path.unlink(missing_ok=True)
            raise

    def _fail(self, error: OSError) -> None:
        if not self._failed:
            self._failed = True
            logger.warning(
                "cannot write session files to %s (%s): sessions stay in memory only",
                self.folder,
                error.strerror or error,
            )

    # -- start-up ------------------------------------------------------------

    def load(self) -> list[PersistedSession]:
        """Every readable session of the folder (made 0700 if new); see the module docstring."""
        if self.folder is None:
            return []
        try:
            make_private_folder(self.folder)
            paths = sorted(p for p in self.folder.iterdir() if p.suffix == _SUFFIX)
        except OSError as error:
            self._fail(error)
            return []
        self._on_disk = {path.stem for path in paths}
        sessions = []
        for path in paths:
            try:
                sessions.append(_read(path))
            except (OSError, ValueError, KeyError, TypeError) as error:
                logger.warning("skipping the session file %s: %s", path, error)
        return sessions


def _read(path: Path) -> PersistedSession:
    lines = path.read_bytes().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    else:
        raise ValueError("it is truncated (its last line is incomplete)")
    if not lines:
        raise ValueError("it is empty")
    try:
        records = [orjson.loads(line) for line in lines]
    except orjson.JSONDecodeError as error:
        raise ValueError(f"it is not JSON lines ({error})") from None
    header = records[0]
    if not isinstance(header, dict) or header.get("v") != FORMAT_VERSION:
        raise ValueError("its header is not a version-1 session header")
    session = PersistedSession(
        agent_id=str(header["agentId"]),
        profile=str(header["profile"]),
        overrides=dict(header["overrides"]),
        created_at=float(header["createdAt"]),
        path=path,
    )
    if f"{session.agent_id}{_SUFFIX}" != path.name:
        raise ValueError("its header names another agent")
    by_seq: dict[int, dict[str, Any]] = {}
    for record in records[1:]:
        if not isinstance(record, dict):
            raise ValueError("a line is not an object")
        if "entry" in record:
            by_seq[int(record["seq"])] = dict(record["entry"])
        elif "append" in record:
            by_seq[int(record["seq"])]["event"]["data"] += str(record["append"])
        elif "history" in record:
            session.history = list(record["history"])
        elif "acpSession" in record:
            session.acp_session = str(record["acpSession"])
        elif "meta" in record:
            session.meta.update(dict(record["meta"]))
        else:
            raise ValueError(f"a line of an unknown kind: {sorted(record)}")
    session.entries = sorted(by_seq.items())
    return session


def _open_file(files: OrderedDict[str, int], path: Path) -> int:
    """Open ``path`` for appending, within :data:`MAX_OPEN_FILES` (the least recent closed).

    Out of descriptors (the daemon's connections took them), every file
    held is closed and the open tried again for a moment: persistence never
    turns off for lack of descriptors while the daemon itself can still get
    one.
    """
    while len(files) >= MAX_OPEN_FILES:
        _close_quietly(files.popitem(last=False)[1])
    attempt = 1
    while True:
        try:
            return open_private(path)
        except OSError as error:
            if error.errno not in (errno.EMFILE, errno.ENFILE) or attempt >= _OPEN_ATTEMPTS:
                raise
        attempt += 1
        while files:
            _close_quietly(files.popitem(last=False)[1])
        time.sleep(_OPEN_PAUSE_S)


def _drain(source: queue.SimpleQueue[_Op | None]) -> list[_Op | None]:
    taken: list[_Op | None] = []
    with contextlib.suppress(queue.Empty):
        while True:
            taken.append(source.get_nowait())
    return taken


def _write_all(fd: int, chunks: list[bytes]) -> None:
    """Write ``chunks`` in order with ``writev``: a batch is never joined (copied) first."""
    views = [memoryview(chunk) for chunk in chunks if chunk]
    at = 0
    while at < len(views):
        written = os.writev(fd, views[at : at + _IOV_MAX])
        while written:  # skip what went out; a partial write resumes mid-chunk
            size = len(views[at])
            if written < size:
                views[at] = views[at][written:]
                break
            written -= size
            at += 1


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
