"""``daemon/status``: agents, runs, child processes, sessions (``docs/protocol.md``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from oma_bridge.backends import RUN_ID_LABEL
from oma_bridge.server.agents.registry import HostedAgent
from oma_bridge.server.agents.runs import LiveRun

if TYPE_CHECKING:
    from oma_bridge.supervision.supervisor import LiveProcess

__all__ = [
    "AGENT_ID_LABEL",
    "RUN_ID_LABEL",
    "AgentBoard",
    "live_processes",
    "live_processes_now",
    "run_rows",
    "uptime",
]

#: The supervisor label of every process the daemon starts for an agent, so
#: that ``daemon/status`` can tell whose a child (or grandchild) is.
AGENT_ID_LABEL = "agentId"


class AgentBoard:
    """``daemon/status``'s ``agents``: kept encoded, made again only after a change.

    A page polls ``daemon/status`` every few seconds, and the answer lists
    every open agent: with thousands open, working the list out at each poll
    held up every other client for tens of milliseconds (PROTOCOL §23).
    The rows are encoded once and reused until an agent opens or closes or
    one's row changes (:meth:`HostedAgent.changed`: a run queued, started
    or ended, a reset); each row is the agent's own, made once
    (:meth:`HostedAgent.status_row`).
    """

    def __init__(self, agents: Mapping[str, HostedAgent]) -> None:
        self._agents = agents
        self._encoded: orjson.Fragment | None = None

    def changed(self) -> None:
        self._encoded = None

    def rows(self) -> orjson.Fragment:
        """The rows as JSON, for the answer's encoder to copy as they are."""
        if self._encoded is None:
            rows = [hosted.status_row() for hosted in self._agents.values()]
            self._encoded = orjson.Fragment(orjson.dumps(rows))
        return self._encoded


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

    return _process_rows(await default_supervisor().processes())


def live_processes_now() -> list[dict[str, Any]] | None:
    """:func:`live_processes` if the loop's thread can list them at once, else ``None``."""
    from oma_bridge.supervision.supervisor import default_supervisor

    listed = default_supervisor().processes_now()
    return None if listed is None else _process_rows(listed)


def _process_rows(listed: list[LiveProcess]) -> list[dict[str, Any]]:
    processes: list[dict[str, Any]] = []
    for pid, labels, rss in listed:
        entry: dict[str, Any] = {"pid": pid, "agentId": labels.get(AGENT_ID_LABEL), "rssBytes": rss}
        if (run_id := labels.get(RUN_ID_LABEL)) is not None:
            entry["runId"] = run_id
        processes.append(entry)
    return processes


def uptime(started: float) -> float:
    return round(time.time() - started, 3)
