"""``oma-bridge status``: agents, runs and processes of a daemon."""

from __future__ import annotations

import argparse
from typing import Any

from oma_bridge.cli.common import byte_size, clock, connect_daemon, format_table


def daemon_pid() -> int | None:
    """The pid of the local daemon, when one is running (for the reload hint)."""
    from oma_bridge.client import DaemonNotRunningError, find_daemon

    try:
        return find_daemon().pid
    except DaemonNotRunningError:
        return None


async def status_command(args: argparse.Namespace) -> int:
    async with connect_daemon(args) as client:
        status = await client.status()
        if args.wait_idle is not None:
            import time

            import anyio

            deadline = time.monotonic() + args.wait_idle
            while status["runs"] and time.monotonic() < deadline:
                await anyio.sleep(0.5)
                status = await client.status()
    busy = args.wait_idle is not None and bool(status["runs"])
    print(
        f"oma-bridge {status['version']}: up {status['uptimeS']:.0f}s, "
        f"{status['connections']} connection(s)"
    )
    sections = [
        (
            "AGENTS",
            ["AGENT ID", "PROFILE", "KIND", "STATE", "QUEUED"],
            [
                [a["agentId"], a["profile"], a["kind"], a["state"], str(a["queuedRuns"])]
                for a in status["agents"]
            ],
        ),
        (
            "RUNS",
            ["RUN ID", "AGENT ID", "METHOD", "STARTED"],
            [
                [r["runId"], r["agentId"] or "-", r["method"], clock(r["startedAt"])]
                for r in status["runs"]
            ],
        ),
        (
            "PROCESSES",
            ["PID", "AGENT ID", "RUN ID", "RSS"],
            [
                [
                    str(p["pid"]),
                    p["agentId"] or "-",
                    p.get("runId") or "-",
                    byte_size(p["rssBytes"]),
                ]
                for p in status["processes"]
            ],
        ),
    ]
    for title, header, rows in sections:
        print(f"\n{title}")
        print(format_table(header, rows) if rows else "  (none)")
    if "evaluation" in status:
        stats = status["evaluation"]
        print("\nEVALUATION  " + "  ".join(f"{k}={v}" for k, v in stats.items()))
    if busy:
        print(f"\n{len(status['runs'])} run(s) still in flight after {args.wait_idle:g} s")
        return 1
    return 0


async def worktrees_command(args: argparse.Namespace) -> int:
    """``worktrees/list`` or ``worktrees/prune`` (extensions), as tables."""
    async with connect_daemon(args) as client:
        if args.prune:
            answer = await client.request("worktrees/prune", {})
        else:
            answer = {"kept": (await client.request("worktrees/list", {}))["worktrees"]}
    header = ["AGENT ID", "PROFILE", "AGENT", "BRANCH", "BASE", "CHANGES", "PATH"]

    def rows(listed: list[dict[str, Any]]) -> list[list[str]]:
        return [
            [
                row["agentId"],
                row.get("profile") or "-",
                row["agent"],
                row["branch"],
                row["base"][:12],
                row["changes"],
                row["path"],
            ]
            for row in listed
        ]

    if args.prune:
        removed = answer["removed"]
        print(f"removed {len(removed)} worktree(s) with their branches")
        if removed:
            print(format_table(header, rows(removed)))
        print(f"\nkept {len(answer['kept'])}")
    print(format_table(header, rows(answer["kept"])) if answer["kept"] else "  (none)")
    return 0
