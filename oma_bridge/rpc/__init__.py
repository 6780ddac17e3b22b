"""JSON-RPC 2.0: the transport-free :class:`RpcCore` and the async :class:`Peer`.

Names resolve on first use (PEP 562), so that the core's constants can be
imported without anyio (the ACP shim and the command line stay light).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oma_bridge.rpc.core import (
        CANCEL_METHOD,
        INTERNAL_ERROR,
        INVALID_PARAMS,
        INVALID_REQUEST,
        METHOD_NOT_FOUND,
        PARSE_ERROR,
        REQUEST_CANCELLED,
        Event,
        Message,
        RequestId,
        RpcCore,
        encode,
        id_key,
    )
    from oma_bridge.rpc.peer import ConnectionClosedError, Peer, PendingCall, unwrap_single_error

_CORE = (
    "CANCEL_METHOD",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "Event",
    "Message",
    "RequestId",
    "RpcCore",
    "encode",
    "id_key",
)
_PEER = ("ConnectionClosedError", "Peer", "PendingCall", "unwrap_single_error")

__all__ = [
    "CANCEL_METHOD",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "ConnectionClosedError",
    "Event",
    "Message",
    "Peer",
    "PendingCall",
    "RequestId",
    "RpcCore",
    "encode",
    "id_key",
    "unwrap_single_error",
]


def __getattr__(name: str) -> Any:
    if name in _CORE:
        module = "oma_bridge.rpc.core"
    elif name in _PEER:
        module = "oma_bridge.rpc.peer"
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
