"""MCP servers checked against what the agent takes, before its session opens (PROTOCOL §22.3).

An ACP ``mcpServers`` entry names its transport in ``type``: ``"http"``,
``"sse"`` (and, unstable in ACP v1, ``"acp"``) need the agent's
``mcpCapabilities.<type>`` to be ``true``; an entry without ``type`` (or
``"stdio"``) is a stdio server, which every ACP agent takes.  An entry the
agent cannot take is never dropped in silence: :func:`refusal` says which
one, by its place and name, what the agent takes, and the fix.  The ACP
facade checks a client's entries at ``session/new`` (docs/acp.md, "MCP
servers"); the handshake checks again between ``initialize`` and the
session's opening, for an agent whose capabilities changed meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["STDIO", "malformed", "refusal", "transport_of", "transports_taken"]

STDIO = "stdio"


def transport_of(server: Mapping[str, Any]) -> str:
    """The transport of one ``mcpServers`` entry: its ``type``, else ``"stdio"``."""
    kind = server.get("type")
    return kind if isinstance(kind, str) and kind else STDIO


def transports_taken(mcp_capabilities: Mapping[str, Any] | None) -> list[str]:
    """What an agent takes: ``stdio`` always, then each capability it set to ``true``."""
    caps = mcp_capabilities or {}
    return [STDIO, *sorted(key for key, value in caps.items() if value is True and key != "_meta")]


def malformed(servers: Sequence[object]) -> str | None:
    """The first entry that is not an MCP server at all (not an object), said; else ``None``."""
    for index, server in enumerate(servers):
        if not isinstance(server, Mapping):
            return f"mcpServers[{index}] is not an object (an MCP server: name and transport)"
    return None


def refusal(
    servers: Sequence[object], mcp_capabilities: Mapping[str, Any] | None, agent: str
) -> str | None:
    """Why ``servers`` cannot go to ``agent``, for the first entry that cannot; else ``None``.

    ``mcp_capabilities``: the agent's ``mcpCapabilities`` from its last
    ``initialize`` (``None``: it advertised none, so stdio alone).
    """
    bad = malformed(servers)
    if bad is not None:
        return bad
    taken = transports_taken(mcp_capabilities)
    for index, server in enumerate(servers):
        assert isinstance(server, Mapping)  # checked by malformed()
        name = server.get("name")
        shown = f'"{name}"' if isinstance(name, str) and name else "(no name)"
        transport = transport_of(server)
        if transport not in taken:
            return (
                f"mcpServers[{index}] {shown} uses the {transport} transport, which agent "
                f'"{agent}" does not take (it advertises mcpCapabilities for: '
                f"{', '.join(taken)}); give that server as a stdio command, or use an agent "
                f"whose mcpCapabilities.{transport} is true"
            )
    return None
