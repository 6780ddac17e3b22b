"""What the library's observers report, where the daemon keeps it (:mod:`oma_bridge.observe`).

Spawns, exits, file writes and denials, terminals go into the audit log,
with the profile of the agent that spawned; a ``note`` (an acp agent's
earlier session could not be continued, PROTOCOL §13.4) goes into the
agent's journal instead.
"""

from __future__ import annotations

from typing import Any

from oma_bridge.observe import Observer
from oma_bridge.server.agents.host import AgentHost
from oma_bridge.server.audit import AuditLog

__all__ = ["audit_observer"]


def audit_observer(host: AgentHost, audit: AuditLog) -> Observer:
    """The observer that hands ``host``'s agents' side effects to ``audit``."""

    def record(event: str, fields: dict[str, Any]) -> None:
        # ``fields`` is this observer's own copy (observe.report): popped and added to freely.
        agent_id = fields.pop("agentId", None)
        hosted = host.agents.get(agent_id) if agent_id else None
        if event == "note":
            if hosted is not None and isinstance(fields.get("text"), str):
                # Appended at once, unpaced (an observer cannot wait): one small
                # entry, written while the agent starts, before its turn's events.
                hosted.journal.append({"type": "note", "text": fields["text"]})
            return
        if event == "spawn" and hosted is not None:
            fields["profile"] = hosted.profile_name
        audit.record(event, agent_id, **fields)

    return record
