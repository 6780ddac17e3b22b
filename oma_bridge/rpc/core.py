"""A transport-free JSON-RPC 2.0 core, and a small async peer on top of it.

Two layers, in the sans-I/O style of ``h11`` and ``websockets``:

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

:class:`Peer`
    The async owner of one connection over a pair of callables (``send``
    takes one encoded message; ``receive`` returns the next message, raw or
    decoded, or ``None`` at end of input).  It keeps the pending-request
    futures, runs the handler of every incoming request concurrently in its
    task group (a slow handler, such as a permission prompt waiting for a
    human, never blocks the reader), dispatches notifications in wire order,
    and fails every pending request when the input ends.

Both serve the ACP client over stdio lines and the daemon over websocket
frames.  ``$/cancel_request`` works both ways: a cancelled :meth:`Peer.request`
tells the other side, and an incoming one cancels the matching handler, which
is then answered with -32800.  The parameter name differs between protocols
(ACP says ``requestId``, the daemon's wire says ``id``); incoming cancels
accept both, outgoing ones use ``cancel_param``.

The core stays generic: what a ``null`` result means is the caller's business.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, TypeGuard

import anyio
import orjson

from oma_bridge.errors import WireError

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
    "NotificationHandler",
    "Peer",
    "PendingCall",
    "RequestHandler",
    "RequestId",
    "RpcCore",
    "encode",
    "id_key",
    "unwrap_single_error",
]

logger = logging.getLogger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_CANCELLED = -32800
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


@dataclass(frozen=True, slots=True)
class Event:
    """Something that arrived, classified for the connection's owner."""

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


def _error_message(request_id: RequestId, code: int, message: str, data: Any = None) -> Message:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
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

    @property
    def pending_incoming(self) -> list[RequestId]:
        """The ids of the peer's requests we have not answered yet."""
        return [key[1] for key in self._incoming]

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


# ---------------------------------------------------------------------- async


class ConnectionClosedError(WireError):
    """The connection ended (EOF, crash) while a request was pending."""

    def __init__(self, message: str = "connection closed") -> None:
        super().__init__(INTERNAL_ERROR, message)


#: Serves one incoming request: ``(method, params) -> result``.  Raise
#: :class:`~oma_bridge.errors.WireError` for an error answer; any other
#: exception answers -32603.
RequestHandler: TypeAlias = Callable[[str, Any], Awaitable[Any]]
#: Handles one notification, awaited in wire order by the reader.
NotificationHandler: TypeAlias = Callable[[str, Any], Awaitable[None]]
Send: TypeAlias = Callable[[bytes], Awaitable[None]]
#: The next message (raw bytes/str, or already decoded), or ``None`` at end of input.
Receive: TypeAlias = Callable[[], Awaitable[object | None]]


@contextlib.contextmanager
def unwrap_single_error() -> Iterator[None]:
    """Re-raise the lone error of a task group as itself.

    The reader and the handlers never raise, so an error leaving a pumping
    block is the block's own; callers should see it unwrapped, not in an
    ``ExceptionGroup``.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from group.exceptions[0].__cause__
        raise


class PendingCall:
    """One request of ours in flight (see :meth:`Peer.start_request`)."""

    def __init__(self, peer: Peer, request_id: RequestId, waiter: _Waiter) -> None:
        self._peer = peer
        self.id = request_id
        self._waiter = waiter

    @property
    def settled(self) -> bool:
        """Whether the answer (or a failure) has arrived."""
        return self._waiter.done.is_set()

    async def wait(self) -> Any:
        """The result; an error answer or a closed connection raises."""
        await self._waiter.done.wait()
        if self._waiter.error is not None:
            raise self._waiter.error
        return self._waiter.result

    async def withdraw(self) -> None:
        """Stop waiting and tell the peer with ``$/cancel_request``; a late answer is ignored."""
        if self._peer._waiters.pop(id_key(self.id), None) is None:
            return
        self._waiter.settle(error=WireError(REQUEST_CANCELLED, "Request cancelled"))
        await self._peer._send_quietly(self._peer.core.cancel(self.id))

    def abandon(self) -> None:
        """Stop waiting without telling the peer."""
        self._peer._waiters.pop(id_key(self.id), None)
        self._peer.core.abandon(self.id)
        self._waiter.settle(error=WireError(REQUEST_CANCELLED, "Request abandoned"))


class _Waiter:
    __slots__ = ("done", "error", "result")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def settle(self, result: Any = None, error: BaseException | None = None) -> None:
        if not self.done.is_set():
            self.result, self.error = result, error
            self.done.set()


async def _method_not_found(method: str, params: Any) -> Any:
    raise WireError(METHOD_NOT_FOUND, f"Method not found: {method}")


async def _ignore(method: str, params: Any) -> None:
    return None


class Peer:
    """One JSON-RPC connection: pending futures, concurrent handlers, ordered notifications.

    Use it as ``async with Peer(send, receive, ...) as peer:``: entering starts
    the reader in the peer's task group; leaving stops the reader, cancels the
    handlers still running and fails every pending request.  The reader also
    fails them (with :class:`ConnectionClosedError`) when ``receive`` returns
    ``None``; :attr:`closed` is then set.

    ``on_invalid`` sees every message the core found malformed or unmatched
    (for logging and counting); the answers due are sent by the peer itself.
    """

    def __init__(
        self,
        send: Send,
        receive: Receive,
        *,
        on_request: RequestHandler = _method_not_found,
        on_notification: NotificationHandler = _ignore,
        on_invalid: Callable[[Event], None] | None = None,
        cancel_param: str = "requestId",
        inline_methods: Collection[str] = (),
    ) -> None:
        self.core = RpcCore(cancel_param=cancel_param)
        #: Requests for these are served by the reader itself, in wire order,
        #: without a task and a cancel scope each: for quick handlers that never
        #: wait on the other side (the reader reads nothing else meanwhile).
        self._inline = frozenset(inline_methods)
        self._send_raw = send
        self._receive = receive
        self._on_request = on_request
        self._on_notification = on_notification
        self._on_invalid = on_invalid
        self._send_lock = anyio.Lock()
        self._waiters: dict[IdKey, _Waiter] = {}
        self._handlers: dict[IdKey, anyio.CancelScope] = {}
        self._closed_error: BaseException | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._exit_stack = contextlib.AsyncExitStack()
        #: Set once the input ended or the peer was closed.
        self.closed = anyio.Event()

    async def __aenter__(self) -> Peer:
        self._exit_stack = contextlib.AsyncExitStack()
        await self._exit_stack.enter_async_context(self.pumping())
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        try:
            return await self._exit_stack.__aexit__(*exc_info)
        finally:
            self.fail_all(ConnectionClosedError())

    @contextlib.asynccontextmanager
    async def pumping(self) -> AsyncIterator[None]:
        """Run the reader (and the handlers it starts) for the duration of the block.

        Leaving the block stops the reader and cancels running handlers but
        keeps the connection's state: pending requests stay pending, and a
        later ``pumping()`` block carries on where this one stopped.  This is
        how a connection that outlives any one task (an ACP agent reused
        across runs) is served only while someone is waiting on it.  The
        ``receive`` callable must therefore be safe to cancel.
        """
        with unwrap_single_error():
            async with anyio.create_task_group() as task_group:
                self._task_group = task_group
                task_group.start_soon(self._read_loop)
                try:
                    yield
                finally:
                    task_group.cancel_scope.cancel()
                    self._task_group = None

    # -------------------------------------------------------------- sending

    async def send(self, message: Message) -> None:
        """Send one message; sends are serialised so frames never interleave."""
        data = encode(message)
        async with self._send_lock:
            await self._send_raw(data)

    async def notify(self, method: str, params: Any = None) -> None:
        await self.send(self.core.notify(method, params))

    async def notify_quietly(self, method: str, params: Any = None) -> None:
        """Send a notification, ignoring a transport that is already gone."""
        await self._send_quietly(self.core.notify(method, params))

    async def request(self, method: str, params: Any = None) -> Any:
        """Send a request and wait for its result; an error answer raises ``WireError``.

        If the caller is cancelled while waiting, the peer is told with
        ``$/cancel_request`` and a late answer is ignored.
        """
        call = await self.start_request(method, params)
        try:
            return await call.wait()
        except BaseException:
            if not call.settled:
                with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                    await call.withdraw()
            raise

    async def start_request(self, method: str, params: Any = None) -> PendingCall:
        """Send a request and return its handle without waiting for the answer.

        For requests whose cancellation is not a plain withdrawal (an ACP
        ``session/prompt`` keeps waiting for its answer after a
        ``session/cancel``), the owner decides when to stop waiting.
        """
        if self._closed_error is not None:
            raise self._closed_error
        request_id, message = self.core.request(method, params)
        waiter = self._waiters[id_key(request_id)] = _Waiter()
        try:
            await self.send(message)
        except BaseException:
            self._waiters.pop(id_key(request_id), None)
            self.core.abandon(request_id)
            raise
        return PendingCall(self, request_id, waiter)

    async def _send_quietly(self, message: Message) -> None:
        try:
            await self.send(message)
        except Exception as exc:  # the transport is gone; nothing to tell
            logger.debug("could not send %s: %s", message.get("method"), exc)

    def fail_all(self, error: BaseException) -> None:
        """Fail every pending request with ``error`` and refuse new ones."""
        if self._closed_error is None:
            self._closed_error = error
        self.core.fail_all()
        waiters, self._waiters = self._waiters, {}
        for waiter in waiters.values():
            waiter.settle(error=error)
        self.closed.set()

    # ------------------------------------------------------------ receiving

    async def _read_loop(self) -> None:
        if self._closed_error is not None:
            return
        error: BaseException = ConnectionClosedError()
        try:
            while True:
                item = await self._receive()
                if item is None:
                    break
                await self.feed(item)
        except Exception as exc:
            error = exc if isinstance(exc, WireError) else ConnectionClosedError(str(exc))
            logger.debug("reader stopped: %r", exc)
        # Cancellation (the end of a pumping block) propagates above and keeps
        # the requests pending; only the end of input fails them.
        self.fail_all(error)

    async def feed(self, item: object) -> None:
        """Process one incoming message (raw or decoded) as the reader would."""
        if isinstance(item, bytes | str):
            event = self.core.receive_bytes(item)
        else:
            event = self.core.receive(item)
        kind = event.kind
        if kind == "notification":
            try:
                await self._on_notification(event.method or "", event.params)
            except Exception:  # one bad notification must not end the connection
                logger.exception("notification handler of %s failed", event.method)
        elif kind in ("result", "error"):
            waiter = self._waiters.pop(id_key(event.id), None)
            if waiter is not None:
                waiter.settle(event.result, event.error)
        elif kind == "request" and event.method in self._inline:
            await self._serve(event, None)
        elif kind == "request":
            assert self._task_group is not None, "feed() runs inside pumping()"
            scope = anyio.CancelScope()
            self._handlers[id_key(event.id)] = scope
            self._task_group.start_soon(self._serve, event, scope)
        elif kind == "cancel":
            running = self._handlers.get(id_key(event.request_id))
            if running is not None:
                running.cancel()
        else:
            if self._on_invalid is not None:
                self._on_invalid(event)
            if event.reply is not None:
                await self._send_quietly(event.reply)

    async def _serve(self, event: Event, scope: anyio.CancelScope | None) -> None:
        request_id, method, core = event.id, event.method or "", self.core
        answer: Message | None = None
        try:
            with scope if scope is not None else contextlib.nullcontext():
                try:
                    result = await self._on_request(method, event.params)
                except WireError as exc:
                    answer = core.respond_error(request_id, exc.rpc_code, exc.message, exc.data)
                except Exception as exc:
                    logger.exception("handler of %s failed", method)
                    answer = core.respond_error(request_id, INTERNAL_ERROR, str(exc) or "error")
                else:
                    answer = core.respond(request_id, result)
            if scope is not None and scope.cancelled_caught:
                answer = core.respond_error(request_id, REQUEST_CANCELLED, "Request cancelled")
        finally:
            self._handlers.pop(id_key(request_id), None)
        if answer is not None:
            await self._send_quietly(answer)

    def pending_requests(self) -> Mapping[IdKey, str]:
        """The peer's requests not answered yet (key -> method)."""
        return self.core.incoming_methods()

    async def answer_pending(self, answer: Callable[[RequestId, str], Message | None]) -> None:
        """Answer every pending request of the peer at once (a turn cancel, a shutdown).

        ``answer(id, method)`` builds the answer with ``self.core.respond`` or
        ``self.core.respond_error``.  Handlers still running for those
        requests are cancelled; their own answer would come too late.
        """
        for key, method in list(self.core.incoming_methods().items()):
            running = self._handlers.pop(key, None)
            if running is not None:
                running.cancel()
            message = answer(key[1], method)
            if message is not None:
                await self._send_quietly(message)
