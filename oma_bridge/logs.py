"""Logging set-up for the daemon: one line per event, text or JSON, secrets redacted.

Every record goes through :func:`~oma_bridge.redaction.redact` after
formatting, so a secret that reaches a log call by accident (an agent's
stderr, a provider's error body) is blanked before it is written.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Literal

import orjson

from oma_bridge.redaction import redact

__all__ = ["configure_logging"]


class _RedactingText(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class _RedactingJson(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        return orjson.dumps(entry).decode()


def configure_logging(fmt: Literal["text", "json"] = "text", level: int = logging.INFO) -> None:
    """Send every log record to stderr, one line (or one JSON object) each."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_RedactingJson())
    else:
        handler.setFormatter(_RedactingText("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
