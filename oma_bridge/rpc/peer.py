"""The async owner of one JSON-RPC connection, on top of :class:`~oma_bridge.rpc.core.RpcCore`.

:class:`Peer` works over a pair of callables (``send`` takes one encoded
message; ``receive`` returns the next message, raw or decoded, or ``None`` at
end of input).  It keeps the pending-request futures, runs the handler of
every incoming request concurrently in its task group (a slow handler, such
as a permission prompt waiting for a human, never blocks the reader),
dispatches notifications in wire order, and fails every pending request when
the input ends.  ``$/cancel_request`` works both ways: a cancelled
:meth:`Peer.request` (or :meth:`Peer.withdraw`) tells the other side, and an
incoming one cancels the matching handler, which is then answered with -32800.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Mapping
from typing import Any, TypeAlias

import anyio
import anyio.abc
import anyio.lowlevel
import orjson

from oma_bridge.errors import WireError
from oma_bridge.rpc.codes import INTERNAL_ERROR, METHOD_NOT_FOUND, REQUEST_CANCELLED
from oma_bridge.rpc.core import (
    Event,
    IdKey,
    Message,
    RequestId,
    RpcCore,
    encode,
    id_key,
)
from oma_bridge.waiting import Signal

__all__ = [
    "NOT_NOW",
    "QUICK_FRAME_MAX",
    "ConnectionClosedError",
    "NotNow",
    "NotificationHandler",
    "Peer",
    "PendingCall",
    "QuickLane",
    "RequestHandler",
    "unwrap_single_error",
]

logger = logging.getLogger(__name__)


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


class NotNow(enum.Enum):
    """A quick answer's refusal: part of it has to wait, so the request is served the usual way."""

    NOT_NOW = "not now"


NOT_NOW = NotNow.NOT_NOW

#: The largest frame :meth:`Peer.serve_now` looks into: a quick request is a
#: method name and an id, and a larger frame is never parsed twice.
QUICK_FRAME_MAX = 512


class QuickLane:
    """What :meth:`Peer.serve_now` answers, and how it writes an answer without waiting.

    ``answer(method, params)`` returns the result, or :data:`NOT_NOW`; it
    must not block.  ``offer(data)`` writes an encoded answer at once if the
    transport can take it without waiting, and says whether it did.
    """

    def __init__(
        self,
        methods: Collection[str],
        answer: Callable[[str, Any], Any],
        offer: Callable[[bytes], bool],
    ) -> None:
        self.methods = frozenset(methods)
        #: The methods' names as they appear in a frame: a frame that holds
        #: none is not parsed here.
        self.needles = tuple(orjson.dumps(method) for method in self.methods)
        self.answer = answer
        self.offer = offer


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
        await self._peer.withdraw(self.id)

    def abandon(self) -> None:
        """Stop waiting without telling the peer."""
        self._peer.abandon(self.id)

    def when_settled(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the answer (or a failure) has arrived; at once if it has.

        For a handle that wakes its consumer at the answer without a task of
        its own to wait for it (the client's streams).  The callback runs in
        the task that settles the call (the reader): it must not block or raise.
        """
        if self.settled:
            callback()
        else:
            self._waiter.callbacks.append(callback)


class _Waiter:
    __slots__ = ("callbacks", "done", "error", "result")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.callbacks: list[Callable[[], None]] = []

    def settle(self, result: Any = None, error: BaseException | None = None) -> None:
        if not self.done.is_set():
            self.result, self.error = result, error
            self.done.set()
            callbacks, self.callbacks = self.callbacks, []
            for callback in callbacks:
                callback()


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
        send_notification: Send | None = None,
        offer_notification: Callable[[bytes], bool] | None = None,
        quick: QuickLane | None = None,
    ) -> None:
        self.core = RpcCore(cancel_param=cancel_param)
        #: Requests answered from the transport's callback (:meth:`serve_now`).
        self._quick = quick
        #: Requests for these are served by the reader itself, in wire order,
        #: without a task and a cancel scope each: for quick handlers that never
        #: wait on the other side (the reader reads nothing else meanwhile).
        self._inline = frozenset(inline_methods)
        self._send_raw = send
        #: Sends a notification: a transport may let one wait for the next
        #: (a stream's events), never an answer or a request.
        self._send_notification = send_notification or send
        #: Takes an encoded notification only if it can without waiting (see
        #: :meth:`offer_notification`); without one, nothing is taken that way.
        self._offer_notification = offer_notification
        self._receive = receive
        self._on_request = on_request
        self._on_notification = on_notification
        self._on_invalid = on_invalid
        # Sends are serialised by a flag, not a lock: a send that does not
        # suspend (the common case: the transport takes the frame at once)
        # costs no task lookup and no trip through the event loop, which an
        # anyio lock's owner bookkeeping costs on every frame of a stream.
        self._sending = False
        self._send_done = Signal()
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
        await self._send(encode(message), self._send_raw)

    async def _send(self, data: bytes, send_raw: Send) -> None:
        while self._sending:  # a send suspended mid-frame (a full write buffer): after it
            await self._send_done.wait()
        self._sending = True
        try:
            await send_raw(data)
        finally:
            self._sending = False
            self._send_done.notify()

    async def notify(self, method: str, params: Any = None) -> None:
        await self._send(encode(self.core.notify(method, params)), self._send_notification)

    async def notify_encoded(self, data: bytes) -> None:
        """Send a notification already encoded (one built once for several connections)."""
        await self._send(data, self._send_notification)

    def offer_notification(self, data: bytes) -> bool:
        """Send an encoded notification now if that needs no waiting; ``False`` if not sent.

        Never waits: for a caller that cannot (a journal handing an entry to
        its live readers) and sends the refused message the usual way later.
        """
        if self._sending or self._offer_notification is None:
            return False
        return self._offer_notification(data)

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
            # Still a scheduling point, so a sender in a loop cannot spin.
            await anyio.lowlevel.checkpoint()

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
                event = self._classify(item)
                if event.kind == "notification":  # inline: an ACP agent's every chunk is one
                    await self._notified(event)
                else:
                    await self._dispatch(event)
        except Exception as exc:
            error = exc if isinstance(exc, WireError) else ConnectionClosedError(str(exc))
            logger.debug("reader stopped: %r", exc)
        # Cancellation (the end of a pumping block) propagates above and keeps
        # the requests pending; only the end of input fails them.
        self.fail_all(error)

    async def feed(self, item: object) -> None:
        """Process one incoming message (raw or decoded) as the reader would."""
        await self._dispatch(self._classify(item))

    def _classify(self, item: object) -> Event:
        if isinstance(item, (bytes, str)):  # a tuple: faster than a union
            return self.core.receive_bytes(item)
        return self.core.receive(item)

    def serve_now(self, data: bytes) -> bool:
        """Answer a quick request from the callback that received its frame: ``True`` if taken.

        For a transport whose reader wakes an event-loop iteration later: a
        loaded daemon's status answer then leaves in the iteration its frame
        arrived in (docs/internals.md D25).  Only a well-formed request for
        one of :class:`QuickLane`'s methods is taken, and only while the
        peer is pumping; the caller hands a frame here only when no earlier
        frame still waits for the reader.  Anything else (another method,
        malformed JSON, a duplicate id) is left to the reader, which answers
        it exactly as it would have: nothing of it was recorded.  A taken
        request whose quick answer is :data:`NOT_NOW` (or raises) is served
        by its handler in a task, as a request that is not inline is; an
        answer the transport cannot take at once is sent the usual way.
        """
        quick = self._quick
        if (
            quick is None
            or self._task_group is None
            or len(data) > QUICK_FRAME_MAX
            or not any(needle in data for needle in quick.needles)
        ):
            return False
        try:
            message = orjson.loads(data)
        except orjson.JSONDecodeError:
            return False
        if type(message) is not dict or message.get("method") not in quick.methods:
            return False
        event = self.core.receive(message)
        if event.kind != "request":
            return False
        try:
            result = quick.answer(event.method or "", event.params)
        except Exception:  # the handler answers it, and logs what a bug raised
            result = NOT_NOW
        if result is NOT_NOW:
            self._start(event)
            return True
        answer = self.core.respond(event.id, result)
        if answer is not None and (self._sending or not quick.offer(encode(answer))):
            self._task_group.start_soon(self._send_quietly, answer)
        return True

    def _start(self, event: Event) -> None:
        """Serve a request in a task of its own, cancellable by ``$/cancel_request``."""
        assert self._task_group is not None, "requests are served while pumping()"
        scope = anyio.CancelScope()
        self._handlers[id_key(event.id)] = scope
        self._task_group.start_soon(self._serve, event, scope)

    async def _notified(self, event: Event) -> None:
        try:
            await self._on_notification(event.method or "", event.params)
        except Exception:  # one bad notification must not end the connection
            logger.exception("notification handler of %s failed", event.method)

    async def _dispatch(self, event: Event) -> None:
        kind = event.kind
        if kind == "notification":
            await self._notified(event)
        elif kind in ("result", "error"):
            waiter = self._waiters.pop(id_key(event.id), None)
            if waiter is not None:
                waiter.settle(event.result, event.error)
        elif kind == "request" and event.method in self._inline:
            await self._serve(event, None)
        elif kind == "request":
            self._start(event)
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

    async def withdraw(self, request_id: RequestId) -> None:
        """Stop waiting for our request and send ``$/cancel_request``; a late answer is ignored."""
        waiter = self._waiters.pop(id_key(request_id), None)
        if waiter is None:
            return
        waiter.settle(error=WireError(REQUEST_CANCELLED, "Request cancelled"))
        await self._send_quietly(self.core.cancel(request_id))

    def abandon(self, request_id: RequestId) -> None:
        """Stop waiting for our request without telling the other side."""
        waiter = self._waiters.pop(id_key(request_id), None)
        self.core.abandon(request_id)
        if waiter is not None:
            waiter.settle(error=WireError(REQUEST_CANCELLED, "Request abandoned"))

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
