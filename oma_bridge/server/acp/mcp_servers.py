"""A client's ``mcpServers`` at the facade's ``session/new``: forwarded whole, or refused.

Without ``client_mcp_servers = true`` (or on an llm or process profile) they
are not forwarded, and the answer names them in
``_meta["oma-bridge/ignoredMcpServers"]`` (logged with the fix).  With
``client_mcp_servers = true`` on an acp profile, every entry is checked
against the agent's ``mcpCapabilities`` before the session exists
(PROTOCOL §22.3, ``backends/acp/mcp_check.py``): what the daemon last heard
from the profile's agents (``ProfileCapabilities``), or, when it has heard
nothing yet and an entry needs more than stdio, what the agent says to an
``initialize`` of its own (one probe, ``agents/probe``'s; what it hears is
kept for the next sessions).  Stdio entries need no probe: every agent takes
them.  A refusal is ``-32602`` with the entry, its transport, what the agent
takes and the fix; an agent that cannot even be started for its probe
refuses the session with the reason (the servers could not be checked).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from oma_bridge.backends.acp.mcp_check import STDIO, malformed, refusal, transport_of
from oma_bridge.errors import WireError
from oma_bridge.rpc.codes import INTERNAL_ERROR, INVALID_PARAMS
from oma_bridge.server.agents.capabilities import ProfileCapabilities
from oma_bridge.server.agents.host import AgentHost
from oma_bridge.server.agents.probe import probe_profiles
from oma_bridge.server.config import ServerSection
from oma_bridge.server.profiles import Profile

__all__ = ["checked_servers", "session_servers"]

logger = logging.getLogger("oma_bridge.server.acp")
IGNORED_META = "oma-bridge/ignoredMcpServers"


async def session_servers(
    host: AgentHost, name: str, profile: Profile, params: Mapping[str, Any]
) -> tuple[tuple[dict[str, Any], ...] | None, dict[str, Any]]:
    """``session/new``'s ``mcpServers`` for profile ``name``: those to forward (``None``:
    none) and the answer's ``_meta`` (the names of those not forwarded, and why, logged)."""
    servers = params.get("mcpServers") or []
    if not isinstance(servers, list):
        raise WireError(INVALID_PARAMS, "mcpServers must be an array")
    if not servers:
        return None, {}
    if profile.kind == "acp" and getattr(profile, "client_mcp_servers", False):
        forwarded = await checked_servers(
            name,
            servers,
            host.config.agents,
            host.settings,
            host.capabilities,
            host.profile_capabilities,
        )
        return forwarded, {}
    ignored = [str(s.get("name", "?")) if isinstance(s, dict) else "?" for s in servers]
    logger.info(
        "session/new on %s: mcpServers not forwarded (%s); set client_mcp_servers = true "
        "on an acp profile to forward them",
        name,
        ", ".join(ignored),
    )
    return None, {IGNORED_META: ignored}


def _refused(message: str) -> WireError:
    return WireError(INVALID_PARAMS, message, {"name": "UnsupportedMcpServer"})


def _needs_capabilities(servers: list[object]) -> bool:
    return any(isinstance(s, Mapping) and transport_of(s) != STDIO for s in servers)


async def checked_servers(
    name: str,
    servers: list[object],
    profiles: Mapping[str, Profile],
    settings: ServerSection,
    heard: ProfileCapabilities,
    known: Callable[[], Mapping[str, Mapping[str, Any]]],
) -> tuple[dict[str, Any], ...]:
    """``servers`` for the agent of acp profile ``name``; ``WireError`` -32602 when one cannot go.

    ``known``: every profile's capabilities as the daemon knows them now
    (``AgentService.profile_capabilities``); a probe notes into ``heard``.
    """
    bad = malformed(servers)
    if bad is not None:
        raise _refused(bad)
    advertised: Mapping[str, Any] | None = None
    if _needs_capabilities(servers):
        advertised = known().get(name)
        if advertised is None:
            problems = await probe_profiles([name], profiles, settings, heard)
            advertised = known().get(name)
            if advertised is None:
                why = problems.get(name, "it said nothing")
                raise WireError(
                    INTERNAL_ERROR,
                    f'the mcpServers could not be checked: the agent of profile "{name}" '
                    f"could not be started to say which MCP transports it takes ({why})",
                )
    mcp = advertised.get("mcpCapabilities") if advertised is not None else None
    refused = refusal(servers, mcp if isinstance(mcp, Mapping) else None, name)
    if refused is not None:
        raise _refused(refused)
    return tuple(dict(server) for server in servers if isinstance(server, Mapping))
