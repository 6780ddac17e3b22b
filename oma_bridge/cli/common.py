"""What the commands share: the connection to the daemon, tables, short texts."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from oma_bridge.client import Client


def connect_daemon(args: argparse.Namespace) -> AbstractAsyncContextManager[Client]:
    """``connect()`` to the daemon the command line names (the local one by default)."""
    from oma_bridge.client import connect

    return connect(
        client_name="oma-bridge-cli",
        url=args.url,
        token_file=args.token_file,
        ca_file=args.ca_file,
    )


def short(value: Any) -> str:
    import orjson

    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def first_line(text: Any) -> str:
    return str(text).strip().partition("\n")[0]


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]
    lines = [header, *rows]
    return "\n".join(
        "  "
        + "  ".join(
            str(cell).ljust(width) for cell, width in zip(line, widths, strict=False)
        ).rstrip()
        for line in lines
    )


def clock(timestamp: float | None) -> str:
    if timestamp is None:
        return "queued"
    import time

    return time.strftime("%H:%M:%S", time.localtime(timestamp))


def byte_size(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{count} B"
