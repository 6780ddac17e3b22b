"""``daemon/status``: agents, runs, child processes, sessions (``docs/protocol.md``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from oma_bridge.backends import RUN_ID_LABEL
from oma_bridge.backends.command import CommandSettings
from oma_bridge.server.agents.registry import HostedAgent
from oma_bridge.server.agents.runs import LiveRun

__all__ = ["AGENT_ID_LABEL", "RUN_ID_LABEL", "agent_rows", "live_processes", "run_rows", "uptime"]

#: The supervisor label of every process the daemon starts for an agent, so
#: that ``daemon/status`` can tell whose a child (or grandchild) is.
AGENT_ID_LABEL = "agentId"


def agent_rows(agents: Mapping[str, HostedAgent]) -> list[dict[str, Any]]:
    return [_agent_row(hosted) for hosted in agents.values()]


def _agent_row(hosted: HostedAgent) -> dict[str, Any]:
    row: dict[str, Any] = {
        "agentId": hosted.agent_id,
        "profile": hosted.profile_name,
        "kind": hosted.agent.kind,
        "state": hosted.agent.state.status,
        "queuedRuns": hosted.queued,
    }
    backend = hosted.agent.config.backend
    if isinstance(backend, CommandSettings):  # the sandbox the agent runs in (§19.1)
        row["sandbox"] = backend.sandbox_info()
    return row


def run_rows(runs: Mapping[str, LiveRun]) -> list[dict[str, Any]]:
    return [
        {
            "runId": run.run_id,
            "agentId": run.agent_id,
            "method": run.method,
            "startedAt": run.started_at,
        }
        for run in runs.values()
    ]


async def live_processes() -> list[dict[str, Any]]:
    """Every live process the daemon started for an agent, grandchildren included.

    The supervisor lists them with the labels their child was given
    (``agentId``; the process backend adds each run's ``runId``).
    """
    from oma_bridge.supervision.supervisor import default_supervisor

    processes: list[dict[str, Any]] = []
    for pid, labels, rss in await default_supervisor().processes():
        entry: dict[str, Any] = {"pid": pid, "agentId": labels.get(AGENT_ID_LABEL), "rssBytes": rss}
        if (run_id := labels.get(RUN_ID_LABEL)) is not None:
            entry["runId"] = run_id
        processes.append(entry)
    return processes


def uptime(started: float) -> float:
    return round(time.time() - started, 3)
