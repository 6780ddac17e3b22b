"""The facade's ``session/fork`` (PROTOCOL §22.4) and where it is advertised.

``session/fork {"sessionId", "cwd", "mcpServers"}`` forks the session as
``agent/fork`` does (``server/agents/fork.py``) and answers the new
``sessionId``; the connection that forked it is attached to the fork, as
``session/new`` attaches it to a new session.  Where the contract is
silent (``docs/acp.md``, "Fork"):

* the fork runs in its parent's folder: a ``cwd`` that resolves elsewhere
  is refused (-32602); llm profiles ignore ``cwd`` as ``session/new`` does;
* the fork keeps its parent's MCP servers (an acp agent forks its session
  with them); entries of the request the parent was not given are not
  taken, and the answer names them in
  ``_meta["oma-bridge/ignoredMcpServers"]``, as ``session/new`` does;
* ``sessionCapabilities.fork`` is advertised on ``/acp/<profile>`` when the
  profile's agents fork (llm and process always, acp when what the daemon
  last heard of its agent says so), and on ``/acp`` when the profile a
  session gets by default does, or, with no default, when every profile does.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from oma_bridge.errors import WireError
from oma_bridge.rpc.codes import INVALID_PARAMS
from oma_bridge.server.acp.mcp_servers import IGNORED_META
from oma_bridge.server.agents.fork import can_fork
from oma_bridge.server.agents.host import AgentHost
from oma_bridge.server.agents.registry import HostedAgent
from oma_bridge.server.session import Session
from oma_bridge.server.worktrees import is_worktree_profile

__all__ = ["fork_advertised", "fork_session"]

logger = logging.getLogger("oma_bridge.server.acp")


def fork_advertised(host: AgentHost, profile: str | None) -> bool:
    """Whether a connection to ``/acp/<profile>`` (``None``: ``/acp``) advertises fork."""
    agents = host.config.agents
    default = host.settings.acp_default_profile
    names = [profile] if profile else [default] if default else list(agents)
    if not names or any(name not in agents for name in names):
        return False
    # Only acp profiles need what their agents said (read from every open agent).
    acp = any(agents[name].kind == "acp" for name in names)
    known = host.profile_capabilities() if acp else {}
    return all(
        can_fork(agents[name].kind, known.get(name)) and not is_worktree_profile(agents[name])
        for name in names
    )


def _check_folder(parent: HostedAgent, cwd: object) -> None:
    if cwd is not None and not isinstance(cwd, str):
        raise WireError(INVALID_PARAMS, "cwd must be a string (an absolute path)")
    folder = parent.meta.get("cwd")
    if parent.agent.kind == "llm" or not cwd or not folder:
        return
    if os.path.realpath(cwd) != os.path.realpath(folder):
        raise WireError(
            INVALID_PARAMS,
            f"a fork runs in its parent's folder: session {parent.agent_id} runs in {folder}, "
            f"not {cwd}",
        )


def _not_taken(parent: HostedAgent, servers: object) -> list[str]:
    if servers is None:
        return []
    if not isinstance(servers, list):
        raise WireError(INVALID_PARAMS, "mcpServers must be an array")
    given = list(parent.backend_update.get("mcp_servers", ()))
    return [
        str(server.get("name", "?")) if isinstance(server, dict) else "?"
        for server in servers
        if server not in given
    ]


async def fork_session(
    host: AgentHost, session: Session, parent: HostedAgent, params: dict[str, Any]
) -> tuple[HostedAgent, dict[str, Any]]:
    """Fork ``parent`` for ``session/fork``: the fork and the answer (see the module docstring)."""
    _check_folder(parent, params.get("cwd"))
    ignored = _not_taken(parent, params.get("mcpServers"))
    forked = await host.fork(session, parent)
    answer: dict[str, Any] = {"sessionId": forked.agent_id}
    if ignored:
        answer["_meta"] = {IGNORED_META: ignored}
        logger.info(
            "session/fork of %s: mcpServers not taken (%s); a fork keeps its parent's",
            parent.agent_id,
            ", ".join(ignored),
        )
    return forked, answer
