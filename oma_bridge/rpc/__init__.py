"""JSON-RPC 2.0: the transport-free :class:`RpcCore` and the async :class:`Peer`.

Names resolve on first use (PEP 562), so that the core's constants can be
imported without anyio (the ACP shim and the command line stay light).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oma_bridge._lazy import lazy_attributes

if TYPE_CHECKING:
    from oma_bridge.rpc.codes import (
        INTERNAL_ERROR,
        INVALID_PARAMS,
        INVALID_REQUEST,
        METHOD_NOT_FOUND,
        PARSE_ERROR,
        REQUEST_CANCELLED,
    )
    from oma_bridge.rpc.core import (
        CANCEL_METHOD,
        Event,
        Message,
        RequestId,
        RpcCore,
        encode,
        encode_notification,
        id_key,
    )
    from oma_bridge.rpc.peer import ConnectionClosedError, Peer, PendingCall, unwrap_single_error


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
    "encode_notification",
    "id_key",
    "unwrap_single_error",
]

_PEER = ("ConnectionClosedError", "Peer", "PendingCall", "unwrap_single_error")
_CODES = (
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
)


def _home(name: str) -> str:
    if name in _PEER:
        return "oma_bridge.rpc.peer"
    return "oma_bridge.rpc.codes" if name in _CODES else "oma_bridge.rpc.core"


__getattr__ = lazy_attributes(__name__, {name: _home(name) for name in __all__})
