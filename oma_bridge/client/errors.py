"""What the client raises, and how a JSON-RPC error answer becomes one of them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from oma_bridge.errors import InvalidMessageError, WireError

__all__ = [
    "ClientError",
    "ConnectOptionError",
    "DaemonError",
    "DaemonNotRunningError",
    "DaemonTLSError",
    "DaemonUnavailableError",
    "RemoteInvalidMessageError",
    "client_error",
]


class ClientError(Exception):
    """The root of everything the client raises about the daemon or its own arguments::

        ClientError
        ├── ConnectOptionError          (also ValueError) arguments of connect() that cannot
        │                               work: an unreadable token or CA file, a bad URL
        ├── DaemonNotRunningError       (also RuntimeError) no daemon answers where the
        │   │                           client looked (no discovery file, a dead pid, a
        │   │                           refused connection)
        │   ├── DaemonUnavailableError  it answered the connection with an HTTP error (401, 503)
        │   └── DaemonTLSError          the TLS handshake failed (an untrusted certificate)
        ├── DaemonError                 (also WireError) a JSON-RPC error answer: ``rpc_code``,
        │                               ``message``, ``data`` (docs/contract.md §7)
        └── RemoteInvalidMessageError   (also InvalidMessageError) the daemon refused the
                                        input (-32010), as a local Agent would

    The builtin second bases keep ``except ValueError`` / ``except
    RuntimeError`` working, and ``except InvalidMessageError`` catches bad
    input alike from a local :class:`~oma_bridge.Agent` and from the daemon.
    """


class DaemonNotRunningError(ClientError, RuntimeError):
    """No daemon answers where the client looked (no discovery file, a dead pid, no answer).

    ``reasons`` says, for a lookup of the discovery files, why each place
    held no live daemon (``no discovery file at ...``, ``... names pid N,
    which is gone``).
    """

    def __init__(self, message: str, *, reasons: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.reasons = tuple(reasons)


class DaemonUnavailableError(DaemonNotRunningError):
    """The daemon answered the connection with an HTTP error (a 503, say).

    ``status`` is the HTTP status: 401 and 403 are a refusal (no token or a
    wrong one, a Host or Origin it does not take), not a daemon that is missing.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class DaemonTLSError(DaemonNotRunningError):
    """The TLS handshake with the daemon failed (most often: its certificate is not trusted)."""


class ConnectOptionError(ClientError, ValueError):
    """Arguments of :func:`connect` that cannot work (an unreadable token or CA file, say)."""


class DaemonError(ClientError, WireError):
    """A JSON-RPC error answer from the daemon (see docs/contract.md §7)."""


class RemoteInvalidMessageError(InvalidMessageError, ClientError):
    """Input the daemon refused (-32010): an :class:`~oma_bridge.errors.InvalidMessageError`."""


def client_error(error: WireError) -> ClientError:
    """The client error for an error answer (or a connection that ended) of the daemon."""
    # Here, not at the top: the shim imports this module and starts without the
    # wire package (which brings the rpc peer and anyio).
    from oma_bridge.wire.codes import INVALID_MESSAGE

    if isinstance(error, ClientError):
        return error
    if error.rpc_code == INVALID_MESSAGE:
        data = error.data if isinstance(error.data, Mapping) else {}
        return RemoteInvalidMessageError(str(data.get("message") or error.message))
    return DaemonError(error.rpc_code, error.message, error.data)
