"""The numbers of the protocols spoken over the JSON-RPC core: JSON-RPC 2.0's and ACP's.

Plain constants, no imports, so every layer that speaks JSON-RPC takes its
codes from here: the core and the peer, the ACP backend (which may not
import ``wire/``), the ACP facade and the demo agent.  The daemon's own
codes and version are ``oma_bridge.wire.codes`` (which re-exports the
JSON-RPC ones below); no other module writes a bare ``-326xx``, ``-320xx``
or ``-32800``.
"""

from __future__ import annotations

__all__ = [
    "ACP_PROTOCOL_VERSION",
    "AUTH_REQUIRED",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "RESOURCE_NOT_FOUND",
]

# JSON-RPC 2.0 (https://www.jsonrpc.org/specification, "Error object").
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
#: The answer to a request withdrawn with ``$/cancel_request`` (LSP's code, which ACP
#: and the daemon's protocol both use).
REQUEST_CANCELLED = -32800

# ACP v1 (the schema's ``ErrorCode``; docs/acp.md).
#: The one ACP version this client and the facade speak (``initialize``'s ``protocolVersion``).
ACP_PROTOCOL_VERSION = 1
#: The agent needs ``authenticate`` first.
AUTH_REQUIRED = -32000
#: A file, terminal or session the request names does not exist.
RESOURCE_NOT_FOUND = -32002
