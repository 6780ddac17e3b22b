"""JSON-RPC 2.0: the transport-free :class:`RpcCore` and the async :class:`Peer`."""

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
