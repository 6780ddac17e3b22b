"""What the client raises, and how a JSON-RPC error answer becomes one of them."""

from __future__ import annotations

from collections.abc import Mapping

from oma_bridge.errors import InvalidMessageError, WireError
from oma_bridge.wire.codes import INVALID_MESSAGE

__all__ = [
    "ConnectOptionError",
    "DaemonError",
    "DaemonNotRunningError",
    "DaemonTLSError",
    "DaemonUnavailableError",
    "raise_for",
]


class DaemonNotRunningError(RuntimeError):
    """No daemon answers where the discovery file says (or there is none)."""


class DaemonUnavailableError(DaemonNotRunningError):
    """The daemon answered the connection with an HTTP error (a 503, say)."""


class DaemonTLSError(DaemonNotRunningError):
    """The TLS handshake with the daemon failed (most often: its certificate is not trusted)."""


class ConnectOptionError(ValueError):
    """Arguments of :func:`connect` that cannot work (an unreadable token or CA file, say)."""


class DaemonError(WireError):
    """A JSON-RPC error answer from the daemon (see docs/contract.md §7)."""


def raise_for(error: WireError) -> None:
    if isinstance(error, DaemonError | InvalidMessageError):
        raise error
    if error.rpc_code == INVALID_MESSAGE:
        data = error.data if isinstance(error.data, Mapping) else {}
        raise InvalidMessageError(str(data.get("message") or error.message)) from None
    raise DaemonError(error.rpc_code, error.message, error.data) from None
