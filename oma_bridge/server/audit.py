"""The audit log: who decided what, and what agents spawned, wrote and ran.

``<state>/audit.jsonl`` (0600), one JSON object a line, appended and flushed
as things happen: ``{"ts" (RFC 3339 UTC), "event", "agentId", "runId"?,
"sessionId"?, ...}``.  Every string goes through the one redaction function
first, so no secret reaches the file.  ``[server] audit_log = false`` turns
it off.  The events and their fields are listed in ``docs/sessions.md``.
:meth:`AuditLog.tail` reads the newest records back (``daemon/audit``, the
status page).  Each record is also shown to the daemon's metrics recorder
(``tap``), whether or not the file is on: the permission decisions are counted
as the log writes them (PROTOCOL §20.3).
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from oma_bridge.private_files import open_private
from oma_bridge.redaction import redact

if TYPE_CHECKING:
    from oma_bridge.server.session import Session

__all__ = ["AuditLog", "decided_by_client"]

logger = logging.getLogger("oma_bridge.server")

AUDIT_NAME = "audit.jsonl"
#: ``tail`` reads backwards in blocks of this size, and never more than the cap.
_TAIL_BLOCK = 64 * 1024
_TAIL_MAX_BYTES = 4 * 1024 * 1024


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: _redacted(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(item) for item in value]
    return value


def _now() -> str:
    now = datetime.datetime.now(datetime.UTC)
    return now.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def decided_by_client(session: Session) -> dict[str, Any]:
    """The ``decidedBy`` (or ``servedBy``) of what a connected client did: its
    ``clientInfo`` from ``initialize`` and its connection."""
    info = session.init.clientInfo if session.init is not None else None
    client = {"name": info.name if info else "", "version": info.version if info else ""}
    return {"client": client, "connection": session.id}


class AuditLog:
    """Appends audit records; a no-op when ``path`` is ``None``."""

    def __init__(
        self, path: Path | None, tap: Callable[[str, Mapping[str, Any]], None] | None = None
    ) -> None:
        self.path = path
        #: Sees every record's event and fields, before the file does (the metrics).
        self.tap = tap
        self._fd: int | None = None
        self._failed = False

    def record(self, event: str, agent_id: str | None, **fields: Any) -> None:
        """Append one record; ``None`` fields are left out."""
        if self.tap is not None:
            self.tap(event, fields)
        if self.path is None or self._failed:
            return
        line: dict[str, Any] = {"ts": _now(), "event": event, "agentId": agent_id}
        line.update((key, value) for key, value in fields.items() if value is not None)
        data = orjson.dumps(_redacted(line)) + b"\n"
        try:
            if self._fd is None:
                self._fd = open_private(self.path)
            os.write(self._fd, data)  # one write per line: lines never interleave
        except OSError as error:
            self._failed = True
            logger.warning("cannot write the audit log %s: %s", self.path, error.strerror)
            self._drop_if_empty()

    def tail(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` records, oldest first (blocking: call it in a thread).

        A line that does not parse (one cut short by a crash) is skipped; at
        most the last 4 MiB of the file are read.  No file, or the log
        turned off: no records.
        """
        if self.path is None:
            return []
        try:
            with self.path.open("rb") as file:
                end = position = file.seek(0, os.SEEK_END)
                data = b""
                while position > 0 and data.count(b"\n") <= limit:
                    if end - position >= _TAIL_MAX_BYTES:
                        break
                    step = min(_TAIL_BLOCK, position)
                    position -= step
                    file.seek(position)
                    data = file.read(step) + data
        except FileNotFoundError:
            return []
        except OSError as error:
            logger.warning("cannot read the audit log %s: %s", self.path, error.strerror)
            return []
        lines = data.split(b"\n")
        if position > 0:
            lines = lines[1:]  # the first one may have begun before what was read
        records: list[dict[str, Any]] = []
        for line in reversed(lines):
            if len(records) == limit:
                break
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(record, dict):
                records.append(record)
        records.reverse()
        return records

    def _drop_if_empty(self) -> None:
        """A log that could not take its first line (a full disk) leaves no empty file."""
        if self._fd is None or self.path is None:
            return
        try:
            if os.fstat(self._fd).st_size == 0:
                self.path.unlink(missing_ok=True)
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)
