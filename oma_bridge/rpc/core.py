"""A transport-free JSON-RPC 2.0 core, in the sans-I/O style of ``h11`` and ``websockets``.

:class:`RpcCore`
    Pure bookkeeping, no I/O and no awaiting.  Feed it what arrived
    (:meth:`RpcCore.receive` for a decoded message, :meth:`RpcCore.receive_bytes`
    for raw JSON); it returns :class:`Event` objects saying what happened and,
    in :attr:`Event.reply`, any error answer that must go back (a malformed
    envelope gets -32700 or -32600 as JSON-RPC 2.0 prescribes).  Build
    outgoing messages with :meth:`RpcCore.request`, :meth:`RpcCore.notify`,
    :meth:`RpcCore.respond` and :meth:`RpcCore.respond_error`.  Outgoing
    requests get integer ids counted from 0; responses are matched on the
    exact id value *and* type (``1`` never answers ``"1"``); an unknown or
    duplicate response is reported, never raised.

It serves the ACP client over stdio lines and the daemon over websocket
frames, through :class:`~oma_bridge.rpc.peer.Peer`.  The ``$/cancel_request``
parameter name differs between protocols
(ACP says ``requestId``, the daemon's wire says ``id``); incoming cancels
accept both, outgoing ones use ``cancel_param``.

The core stays generic: what a ``null`` result means is the caller's business.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, TypeGuard

import orjson

from oma_bridge.errors import WireError
from oma_bridge.rpc.codes import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR

__all__ = [
    "CANCEL_METHOD",
    "Event",
    "IdKey",
    "Message",
    "RequestId",
    "RpcCore",
    "encode",
    "encode_notification",
    "error_data",
    "id_key",
]

CANCEL_METHOD = "$/cancel_request"

RequestId: TypeAlias = int | str | None
Message: TypeAlias = dict[str, Any]
#: The key of an id in a pending map: its type and value, so ``1`` and ``"1"`` differ.
IdKey: TypeAlias = tuple[str, int | str | None]

_INT64 = 2**63


def encode(message: Message) -> bytes:
    """One message as compact UTF-8 JSON, without a trailing newline.

    orjson never emits a raw newline, so the result is safe as one stdio line.
    """
    return orjson.dumps(message)


def encode_notification(method: str, params: Any) -> bytes:
    """A notification encoded (what :meth:`RpcCore.notify` builds): one message for many peers."""
    return orjson.dumps({"jsonrpc": "2.0", "method": method, "params": params})


def _valid_id(value: object) -> TypeGuard[RequestId]:
    if value is None or isinstance(value, str):
        return True
    return isinstance(value, int) and not isinstance(value, bool) and -_INT64 <= value < _INT64


def id_key(value: RequestId) -> IdKey:
    """The exact identity of a request id: value and JSON type."""
    return (type(value).__name__, value)


EventKind: TypeAlias = Literal[
    "request",  # the peer asks: answer with respond()/respond_error()
    "notification",  # the peer tells
    "cancel",  # the peer withdrew one of its pending requests (request_id)
    "result",  # a pending request of ours succeeded (id, result)
    "error",  # a pending request of ours failed (id, error)
    "unmatched",  # a response to no pending request (unknown id, duplicate, late)
    "invalid",  # a malformed message; `reply` holds the answer, if one is due
]


# Not frozen: a frozen dataclass sets each of its nine fields through
# object.__setattr__, 2.4 us an Event against 0.7 here, and one is made for
# every message a peer reads (an ACP agent's every chunk: docs/benchmarks.md,
# "ACP facade").  Read-only by convention: nothing assigns to an Event.
@dataclass(slots=True)
class Event:
    """Something that arrived, classified for the connection's owner (read-only)."""

    kind: EventKind
    id: RequestId = None
    method: str | None = None
    params: Any = None
    result: Any = None
    error: WireError | None = None
    #: A message the owner must send back (an error answer to a bad envelope).
    reply: Message | None = None
    #: For ``cancel``: the id of the withdrawn request.
    request_id: RequestId = None
    #: Why a message was ``invalid`` or ``unmatched``, for the log.
    detail: str = ""


def error_data(message: str, data: Any = None) -> Any:
    """``data`` of an error answer: ``data.details`` is the message (PROTOCOL §18.3).

    ACP clients (Toad, the TypeScript SDK) show an error's ``data.details``,
    not its ``message``.  Every error answer is built here, so each carries
    it beside its other keys (``name``, ``code``...).  A ``details`` string
    already there is kept: an ACP agent's own error relayed as it is said
    more there than in its message.  ``data`` that is not an object (a
    relayed agent's list or string) is left as it came.
    """
    if data is None:
        return {"details": message}
    if isinstance(data, dict) and not isinstance(data.get("details"), str):
        return {**data, "details": message}
    return data


def _error_message(request_id: RequestId, code: int, message: str, data: Any = None) -> Message:
    error: dict[str, Any] = {"code": code, "message": message, "data": error_data(message, data)}
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def _invalid(detail: str, request_id: RequestId = None, *, code: int = INVALID_REQUEST) -> Event:
    message = "Parse error" if code == PARSE_ERROR else "Invalid Request"
    return Event(
        "invalid",
        reply=_error_message(request_id, code, message, {"detail": detail}),
        detail=detail,
    )


@dataclass
class RpcCore:
    """The JSON-RPC 2.0 state of one connection, free of any transport.

    ``cancel_param`` names the parameter of outgoing ``$/cancel_request``
    notifications (``requestId`` for ACP, ``id`` for the daemon's wire).
    """

    cancel_param: str = "requestId"
    _next_id: int = 0
    #: Our requests still waiting for an answer.
    _outgoing: dict[IdKey, str] = field(default_factory=dict)
    #: The peer's requests we have not answered yet.
    _incoming: dict[IdKey, str] = field(default_factory=dict)

    # ------------------------------------------------------------------ out

    def request(self, method: str, params: Any = None) -> tuple[int, Message]:
        """A new request with the next id; it stays pending until answered or abandoned."""
        request_id = self._next_id
        self._next_id += 1
        self._outgoing[id_key(request_id)] = method
        message: Message = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        return request_id, message

    def notify(self, method: str, params: Any = None) -> Message:
        message: Message = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        return message

    def cancel(self, request_id: RequestId) -> Message:
        """Withdraw one of our requests: forget it and build ``$/cancel_request``.

        A late answer to it is then reported as ``unmatched``.
        """
        self._outgoing.pop(id_key(request_id), None)
        return self.notify(CANCEL_METHOD, {self.cancel_param: request_id})

    def abandon(self, request_id: RequestId) -> None:
        """Forget one of our requests without telling the peer."""
        self._outgoing.pop(id_key(request_id), None)

    def respond(self, request_id: RequestId, result: Any) -> Message | None:
        """The answer to a pending request of the peer, or ``None`` if it is not pending.

        ``None`` means the request was already answered (or never existed):
        a request is answered exactly once.
        """
        if self._incoming.pop(id_key(request_id), None) is None:
            return None
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    def respond_error(
        self, request_id: RequestId, code: int, message: str, data: Any = None
    ) -> Message | None:
        """An error answer to a pending request of the peer (see :meth:`respond`)."""
        if self._incoming.pop(id_key(request_id), None) is None:
            return None
        return _error_message(request_id, code, message, data)

    @property
    def pending_outgoing(self) -> list[RequestId]:
        """The ids of our requests still waiting for an answer."""
        return [key[1] for key in self._outgoing]

    def incoming_methods(self) -> dict[IdKey, str]:
        """The peer's requests we have not answered yet, by id key, with their methods."""
        return dict(self._incoming)

    def fail_all(self) -> list[RequestId]:
        """Forget every pending request of ours (the connection ended); returns their ids."""
        ids = self.pending_outgoing
        self._outgoing.clear()
        return ids

    # ------------------------------------------------------------------- in

    def receive_bytes(self, data: bytes | str) -> Event:
        """Classify one raw JSON message; undecodable input is a -32700 ``invalid``."""
        try:
            message = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            return _invalid(f"not JSON: {exc}", code=PARSE_ERROR)
        return self.receive(message)

    def receive(self, message: object) -> Event:
        """Classify one decoded message.  Never raises, whatever it is given."""
        if type(message) is dict and "id" not in message:
            # A well-formed notification with object params, in four look-ups:
            # an ACP agent's every chunk is one.  Anything else, the checks below.
            method = message.get("method")
            params = message.get("params")
            if (
                type(method) is str
                and type(params) is dict
                and message.get("jsonrpc") == "2.0"
                and method != CANCEL_METHOD
            ):
                return Event("notification", None, method, params)
        if isinstance(message, list):
            return _invalid("JSON-RPC batches are not supported")
        if not isinstance(message, dict):
            return _invalid("a message must be a JSON object")
        raw_id = message.get("id")
        has_id = "id" in message
        echo_id = raw_id if has_id and _valid_id(raw_id) else None
        if message.get("jsonrpc") != "2.0":
            if "method" not in message and self._is_ours(raw_id):
                # Answer to one of our requests, but broken: do not leave it hanging.
                return self._fail_pending(raw_id, 'response without jsonrpc "2.0"')
            return self._invalid_unless_response(message, 'jsonrpc must be "2.0"', echo_id)
        if "method" in message:
            return self._receive_call(message, has_id, raw_id)
        if "result" in message or "error" in message:
            return self._receive_response(message, has_id, raw_id)
        return _invalid("neither a request, a notification nor a response", echo_id)

    def _invalid_unless_response(self, message: Message, detail: str, echo_id: RequestId) -> Event:
        # A broken response must never be answered: that would let two peers
        # bounce error answers at each other forever.
        if "method" not in message and ("result" in message or "error" in message):
            return Event("unmatched", id=echo_id, detail=detail)
        return _invalid(detail, echo_id)

    def _receive_call(self, message: Message, has_id: bool, raw_id: object) -> Event:
        method = message["method"]
        echo_id = raw_id if has_id and _valid_id(raw_id) else None
        if has_id and not _valid_id(raw_id):
            return _invalid("id must be a string, an integer or null")
        if not isinstance(method, str):
            return _invalid("method must be a string", echo_id)
        params = message.get("params")
        if "params" in message and not isinstance(params, dict | list):
            return _invalid("params must be an object or an array", echo_id)
        if not has_id:
            if method == CANCEL_METHOD:
                return self._receive_cancel(params)
            return Event("notification", method=method, params=params)
        request_id: RequestId = raw_id  # type: ignore[assignment]
        key = id_key(request_id)
        if key in self._incoming:
            return _invalid("duplicate id of a pending request", request_id)
        self._incoming[key] = method
        return Event("request", id=request_id, method=method, params=params)

    def _receive_cancel(self, params: Any) -> Event:
        if isinstance(params, dict):
            for name in ("requestId", "id"):
                if name in params and _valid_id(params[name]):
                    target = params[name]
                    if id_key(target) in self._incoming:
                        return Event("cancel", method=CANCEL_METHOD, request_id=target)
                    return Event("unmatched", detail="cancel of no pending request")
        return Event("unmatched", detail="$/cancel_request without a valid requestId")

    def _is_ours(self, raw_id: object) -> bool:
        return _valid_id(raw_id) and id_key(raw_id) in self._outgoing

    def _fail_pending(self, raw_id: object, detail: str) -> Event:
        request_id: RequestId = raw_id  # type: ignore[assignment]
        self._outgoing.pop(id_key(request_id), None)
        error = WireError(INVALID_REQUEST, f"invalid response: {detail}")
        return Event("error", id=request_id, error=error, detail=detail)

    def _receive_response(self, message: Message, has_id: bool, raw_id: object) -> Event:
        if not has_id or not _valid_id(raw_id):
            return Event("unmatched", detail="response without a valid id")
        request_id = raw_id
        if id_key(request_id) not in self._outgoing:
            return Event("unmatched", id=request_id, detail="response to no pending request")
        if "result" in message and "error" in message:
            return self._fail_pending(raw_id, "both result and error")
        if "result" in message:
            self._outgoing.pop(id_key(request_id))
            return Event("result", id=request_id, result=message["result"])
        error = message["error"]
        if not isinstance(error, dict):
            return self._fail_pending(raw_id, "error is not an object")
        self._outgoing.pop(id_key(request_id))
        code = error.get("code")
        if not isinstance(code, int) or isinstance(code, bool):
            code = INTERNAL_ERROR
        text = error.get("message")
        if not isinstance(text, str):
            text = "" if text is None else str(text)
        return Event("error", id=request_id, error=WireError(code, text, error.get("data")))
