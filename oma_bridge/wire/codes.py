"""Names and numbers of the daemon's protocol: versions, subprotocols, error codes.

Plain constants and the builders of the daemon's own errors, with no I/O and
no pydantic, so that the client, the CLI and the ACP shim import this alone
and start fast.  Every error code of ``docs/protocol.md`` ("Errors") is named
here (JSON-RPC's own in :mod:`oma_bridge.rpc.codes`, below ``wire/``, where
the ACP backend takes them too); code raises and compares these names, and
only the tables of :mod:`.schema` and the docs spell the numbers out.
"""

from __future__ import annotations

from typing import Any, TypedDict

from oma_bridge.errors import InvalidMessageError, SandboxUnavailableError, WireError
from oma_bridge.rpc.codes import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
)

__all__ = [
    "AUTH_SUBPROTOCOL_PREFIX",
    "CURSOR_EXPIRED",
    "FORBIDDEN",
    "INTERNAL_ERROR",
    "INVALID_MESSAGE",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "NOT_FOUND",
    "NOT_INITIALIZED",
    "OVERLOADED",
    "PARSE_ERROR",
    "PROTOCOL_VERSION",
    "RUN_IN_PROGRESS",
    "SANDBOX_UNAVAILABLE",
    "SUBPROTOCOL",
    "UNREACHABLE",
    "UNSUPPORTED_VERSION",
    "Discovery",
    "forbidden",
    "invalid_message",
    "invalid_params",
    "not_found",
    "sandbox_unavailable",
]

PROTOCOL_VERSION = 1
#: The websocket subprotocol of this protocol, and the prefix of the one that
#: carries the token for browsers (``oma-bridge.auth.<token>``).
SUBPROTOCOL = "oma-bridge.v1"
AUTH_SUBPROTOCOL_PREFIX = "oma-bridge.auth."

OVERLOADED = -32001
NOT_INITIALIZED = -32002
UNSUPPORTED_VERSION = -32003
INVALID_MESSAGE = -32010
NOT_FOUND = -32011
FORBIDDEN = -32012
CURSOR_EXPIRED = -32013
RUN_IN_PROGRESS = -32014
SANDBOX_UNAVAILABLE = -32015
#: The ACP shim's answer when no daemon can be reached (PROTOCOL §18.3): not
#: -32603, which some editors hide as an internal error.  The daemon itself
#: never sends it (it is the daemon that is missing).
UNREACHABLE = -32000


class Discovery(TypedDict):
    """The content of the discovery file ``bridge.json``."""

    pid: int
    version: str
    protocolVersion: int
    socket: str | None
    url: str | None
    token: str


def invalid_params(errors: list[dict[str, Any]]) -> WireError:
    """-32602 with ``data = {"errors": [...]}``."""
    return WireError(INVALID_PARAMS, "Invalid params", {"errors": errors})


def not_found(what: str) -> WireError:
    """-32011: an unknown agentId, runId or profile."""
    return WireError(NOT_FOUND, f"Not found: {what}", {"name": "NotFound"})


def forbidden(why: str) -> WireError:
    """-32012: refused by the daemon's policy."""
    return WireError(FORBIDDEN, f"Forbidden: {why}", {"name": "Forbidden"})


def invalid_message(error: InvalidMessageError) -> WireError:
    """-32010: input the shape guard or the text-only boundary refused."""
    return WireError(INVALID_MESSAGE, error.message, error.to_wire())


def sandbox_unavailable(error: SandboxUnavailableError) -> WireError:
    """-32015: a sandboxed profile's sandbox cannot be applied; nothing was spawned."""
    data = {"name": "SandboxUnavailable", "reason": error.reason}
    return WireError(SANDBOX_UNAVAILABLE, error.message, data)
