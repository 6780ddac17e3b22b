"""What an ACP agent said it can do at ``initialize``, as the daemon shows it (PROTOCOL §22.2).

:func:`advertised_of` keeps the five things a client of the daemon chooses
by: ``loadSession``, ``sessionCapabilities`` (``resume``, ``fork``, ...),
``promptCapabilities`` (images, audio, embedded context), ``mcpCapabilities``
(``http``, ``sse``) and ``authMethods``, with ``agentInfo`` (name, version)
when the agent gave one and ``initializedAt`` (Unix time).  Each is the
agent's own JSON as it sent it, copied (the lenient schema already turned a
malformed value into its default): an absent object is ``{}``, absent
``loadSession`` is ``false``, as ACP reads them.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from oma_bridge.backends.acp.schema import InitializeResponse

__all__ = ["advertised_of"]


def _copy(value: Any) -> Any:
    # One plain JSON copy: nothing of the agent's objects is shared with the caller.
    return orjson.loads(orjson.dumps(value))


def advertised_of(init: InitializeResponse, at: float | None = None) -> dict[str, Any]:
    """The capabilities of ``init`` (see the module docstring)."""
    caps = init.agent_capabilities
    advertised: dict[str, Any] = {
        "loadSession": caps.load_session,
        "sessionCapabilities": _copy(caps.session_capabilities or {}),
        "promptCapabilities": _copy(caps.prompt_capabilities or {}),
        "mcpCapabilities": _copy(caps.mcp_capabilities or {}),
        "authMethods": _copy(init.auth_methods),
    }
    if init.agent_info is not None:
        advertised["agentInfo"] = _copy(init.agent_info)
    advertised["initializedAt"] = round(time.time() if at is None else at, 3)
    return advertised
