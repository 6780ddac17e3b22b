"""``daemon/status``: agents, runs, child processes, sessions (``docs/protocol.md``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import psutil

from oma_bridge.server.agents.registry import HostedAgent
from oma_bridge.server.agents.runs import LiveRun

__all__ = ["AGENT_ID_VARIABLE", "RUN_ID_VARIABLE", "agent_rows", "live_processes", "run_rows"]

#: Set in the environment of every process the daemon starts for an agent, so
#: that ``daemon/status`` can tell whose a child (or grandchild) is.
AGENT_ID_VARIABLE = "OMA_BRIDGE_AGENT_ID"
RUN_ID_VARIABLE = "OMA_BRIDGE_RUN_ID"


def agent_rows(agents: Mapping[str, HostedAgent]) -> list[dict[str, Any]]:
    return [
        {
            "agentId": hosted.agent_id,
            "profile": hosted.profile_name,
            "kind": hosted.agent.kind,
            "state": hosted.agent.state.status,
            "queuedRuns": hosted.queued,
        }
        for hosted in agents.values()
    ]


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


def live_processes(
    agents: Mapping[str, HostedAgent], runs: Mapping[str, LiveRun]
) -> list[dict[str, Any]]:
    """Every live child the daemon started for an agent.

    The supervisor knows its children, so no scan of ``/proc`` is needed
    (psutil's recursive ``children()`` reads every process on the machine);
    each child's environment says whose it is.
    """
    from oma_bridge.supervision.supervisor import default_supervisor

    running = {
        run.agent_id: run.run_id
        for run in runs.values()
        if run.agent_id is not None and run.started_at is not None
    }
    processes: list[dict[str, Any]] = []
    for child in default_supervisor().live():
        try:
            process = psutil.Process(child.pid)
            env = process.environ()
            rss = process.memory_info().rss
        except psutil.Error:
            continue  # gone meanwhile
        agent_id, run_id = env.get(AGENT_ID_VARIABLE), env.get(RUN_ID_VARIABLE)
        entry: dict[str, Any] = {"pid": child.pid, "agentId": agent_id, "rssBytes": rss}
        hosted = agents.get(agent_id) if agent_id else None
        if run_id is None and hosted is not None and hosted.agent.kind == "process":
            run_id = running.get(hosted.agent_id)
        if run_id is not None:
            entry["runId"] = run_id
        processes.append(entry)
    return processes


def uptime(started: float) -> float:
    return round(time.time() - started, 3)
