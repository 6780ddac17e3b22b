"""A client's ``mcpServers`` at the facade's ``session/new``: forwarded whole, or refused.

With ``client_mcp_servers = true`` on an acp profile, every entry is
checked against the agent's ``mcpCapabilities`` before the session exists
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

from collections.abc import Callable, Mapping
from typing import Any

from oma_bridge.backends.acp.mcp_check import STDIO, malformed, refusal, transport_of
from oma_bridge.errors import WireError
from oma_bridge.rpc.codes import INTERNAL_ERROR, INVALID_PARAMS
from oma_bridge.server.agents.capabilities import ProfileCapabilities
from oma_bridge.server.agents.probe import probe_profiles
from oma_bridge.server.config import ServerSection
from oma_bridge.server.profiles import Profile

__all__ = ["checked_servers"]


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
