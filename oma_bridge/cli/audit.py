"""``oma-bridge audit``: the audit log as a table."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from oma_bridge.cli.common import format_table, short
from oma_bridge.cli_exits import EXIT_FAILED


async def audit_command(args: argparse.Namespace) -> int:
    import anyio
    import orjson

    from oma_bridge.paths import default_state_dir

    path = args.file or default_state_dir() / "audit.jsonl"
    header = ["TIME", "EVENT", "AGENT", "RUN", "DETAIL"]
    offset = 0
    printed_header = False
    while True:
        try:
            with path.open("rb") as handle:
                handle.seek(offset)
                data = handle.read()
        except FileNotFoundError:
            data = b""
            if not args.follow:
                print(f"oma-bridge: no audit log at {path}", file=sys.stderr)
                return EXIT_FAILED
        complete = data[: data.rfind(b"\n") + 1]
        offset += len(complete)
        rows = []
        for line in complete.splitlines():
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if args.agent is None or record.get("agentId") == args.agent:
                rows.append(audit_row(record))
        if rows or not printed_header:
            table = format_table(header, rows).splitlines()
            print("\n".join(table if not printed_header else table[1:]), flush=True)
            printed_header = True
        if not args.follow:
            return 0
        await anyio.sleep(0.5)


def audit_row(record: dict[str, Any]) -> list[str]:
    known = {"ts", "event", "agentId", "runId"}
    detail = " ".join(f"{key}={short(value)}" for key, value in record.items() if key not in known)
    return [
        str(record.get("ts", "")),
        str(record.get("event", "")),
        str(record.get("agentId") or "-"),
        str(record.get("runId") or "-"),
        detail,
    ]
