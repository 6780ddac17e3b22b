"""JSON-RPC 2.0: the transport-free :class:`RpcCore` and the async :class:`Peer`.

The codes are plain constants (``codes.py`` imports nothing); the other
names resolve on first use (PEP 562), so that the codes can be imported
without anyio (the ACP shim and the command line stay light).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oma_bridge._lazy import lazy_attributes
from oma_bridge.rpc.codes import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_CANCELLED,
)

if TYPE_CHECKING:
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
__getattr__ = lazy_attributes(
    __name__,
    {
        name: "oma_bridge.rpc.peer" if name in _PEER else "oma_bridge.rpc.core"
        for name in __all__
        if name not in globals()  # the codes, imported above
    },
)
