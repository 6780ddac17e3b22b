"""``AcpSession``: one connection to one ACP agent and its protocol session, as data.

As h11's connection is, the session is a state machine with explicit
states, and each step of the protocol is a transition of it::

    SPAWNED --open--> READY --prompt--> PROMPTING --answer--> READY
       |                |                   |
       |                |                   +--cancel--> CANCELLING --turn ended--> READY
       |                |                   |                |
       +----------------+-------------------+----------------+--end, crash--> DEAD

* ``SPAWNED``: the transport is up; :meth:`AcpSession.open` runs the
  handshake (``initialize``, ``authenticate``, the session opened with
  resume, then load, then new: see ``handshake.py``) and the profile's model.
* ``READY``: a session is open and no turn runs; the connection is read only
  while someone waits on it (a request between runs, see :meth:`serving`).
* ``PROMPTING``: one ``session/prompt`` of one :class:`TurnState` (the turn
  owns the connection from the prompt's start to its end).
* ``CANCELLING``: ``session/cancel`` was sent, the held requests answered
  ``cancelled``, the terminals released; the turn has ``cancel_grace_s`` to
  end (any answer or error ends it), after which the agent is ended.
* ``DEAD``: the connection ended or the agent was ended; the session is never
  used again (the backend starts another).  :meth:`AcpSession.probe` goes
  there straight from ``SPAWNED``, after ``initialize`` alone.

A transition not in the table is a bug here, never the agent's doing: it
raises :class:`RuntimeError`.  The session knows its agent only as an
:class:`~oma_bridge.backends.acp.transport.AgentTransport`: a process over
stdio or, later, a remote agent over a WebSocket.

Why the connection is pumped only while a run (or a start, or a cancel, or
a request) waits on it: a backend outlives any one task, and anyio task
groups cannot be kept open across calls.  Between runs nothing reads the
agent; what it writes meanwhile waits in the transport.  Updates that
arrive before the prompt is sent reach the run's stream raw, except message
and tool updates (a ``session/load`` replay, late ones of the previous
turn); updates after the turn's answer are dropped as late.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
from pydantic import ValidationError

from oma_bridge.backends import Emit
from oma_bridge.backends.acp.agent_requests import AgentRequests
from oma_bridge.backends.acp.handshake import Handshake, Opened, auth_error
from oma_bridge.backends.acp.schema import InitializeResponse
from oma_bridge.backends.acp.services import ClientServices
from oma_bridge.backends.acp.transport import AgentTransport
from oma_bridge.backends.acp.turn import event_of_update
from oma_bridge.backends.acp.turn_state import TurnState
from oma_bridge.backends.elicitation import CANCEL
from oma_bridge.backends.permissions import CANCELLED_OUTCOME
from oma_bridge.errors import BackendError, OMAError, WireError
from oma_bridge.redaction import redact
from oma_bridge.rpc import ConnectionClosedError, Event, Message, Peer, PendingCall, RequestId
from oma_bridge.rpc.codes import AUTH_REQUIRED, REQUEST_CANCELLED

__all__ = ["CUT_OFF_QUIET_S", "AcpSession", "SessionState"]

_T = TypeVar("_T")

logger = logging.getLogger(__name__)


class SessionState(enum.Enum):
    SPAWNED = "spawned"
    READY = "ready"
    PROMPTING = "prompting"
    CANCELLING = "cancelling"
    DEAD = "dead"


_S = SessionState
#: The transitions the protocol allows (see the module docstring).
_NEXT: dict[SessionState, frozenset[SessionState]] = {
    _S.SPAWNED: frozenset({_S.READY, _S.DEAD}),
    _S.READY: frozenset({_S.PROMPTING, _S.DEAD}),
    _S.PROMPTING: frozenset({_S.READY, _S.CANCELLING, _S.DEAD}),
    _S.CANCELLING: frozenset({_S.READY, _S.DEAD}),
    _S.DEAD: frozenset({_S.DEAD}),
}
#: How long an agent must send nothing for a cut-off turn to count as ended.
CUT_OFF_QUIET_S = 0.3
#: What ends a prompt's wait without a result: the agent's error answer, or the transport.
_PROMPT_FAILURES = (WireError, OSError, anyio.BrokenResourceError)


class AcpSession:
    """One ACP agent's connection and protocol session (see the module docstring)."""

    def __init__(
        self,
        transport: AgentTransport,
        requests: AgentRequests,
        *,
        label: str,
        cancel_grace_s: float,
        stop_grace_s: float,
    ) -> None:
        self.state = SessionState.SPAWNED
        #: What the agent said at ``initialize``, once open.
        self.init: InitializeResponse | None = None
        #: The agent's own id of the session, once open.
        self.session_id: str | None = None
        #: The turn that owns the connection (``PROMPTING``, ``CANCELLING``).
        self.turn: TurnState | None = None
        self._transport = transport
        self._requests = requests
        self._label = label
        self._cancel_grace_s = cancel_grace_s
        self._stop_grace_s = stop_grace_s
        # Who the reader works for, for the duration of one serving block.
        self._listener: TurnState | None = None
        self._side: Emit | None = None
        self._services = ClientServices()
        #: Messages read from the agent (a quiet agent reads none: see cancel_cut_off_turn).
        self._received = 0
        # Text chunks are joined per read (see Turn.flush): flush before
        # waiting on the agent, and before anything but an update.
        transport.set_before_wait(self._flush_text)
        self._peer = Peer(
            transport.send,
            self._receive,
            on_request=self._on_request,
            on_notification=self._on_notification,
            on_invalid=self._on_invalid,
        )

    # -- the state -----------------------------------------------------------------

    @property
    def live(self) -> bool:
        return self.state is not SessionState.DEAD

    @property
    def pid(self) -> int | None:
        return self._transport.pid if self.live else None

    @property
    def gone(self) -> bool:
        """The agent's end went away by itself (its process exited) and nobody noticed yet."""
        return self.live and self._transport.gone

    def describe_end(self) -> str:
        return self._transport.describe_end()

    def _to(self, state: SessionState) -> None:
        if state not in _NEXT[self.state]:
            raise RuntimeError(
                f"ACP session: no transition from {self.state.value} to {state.value}"
            )
        self.state = state

    def _settled(self) -> None:
        """Back to ``READY``, unless the agent was ended meanwhile (the backend closed)."""
        if self.live:
            self._to(SessionState.READY)

    def _closed_error(self) -> BackendError:
        return BackendError(f'ACP agent "{self._label}" is closed')

    # -- SPAWNED -> READY -------------------------------------------------------------

    async def open(
        self, handshake: Handshake, turn: TurnState | None, services: ClientServices
    ) -> Opened:
        """The handshake; what the agent sends meanwhile goes to ``turn`` (if any).

        A failure ends the agent (``DEAD``) and raises: a ``BackendError`` (an
        ``AuthRequiredError`` for -32000) for what the agent answered, the
        cancellation as it is.
        """
        if self.state is not SessionState.SPAWNED:
            raise RuntimeError(f"ACP session: open in state {self.state.value}")
        opened = await self._start_step(handshake.run, turn, services)
        if not self.live:  # ended by a close while the answers came in
            raise self._closed_error()
        self.init, self.session_id = opened.init, opened.session_id
        self._to(SessionState.READY)
        return opened

    async def probe(self, handshake: Handshake) -> InitializeResponse:
        """``initialize`` alone, then the end (``SPAWNED`` -> ``DEAD``): what the agent can do.

        No session is opened (an agent that wants a login first still says
        what it can do).  A failure raises as :meth:`open`'s does; either
        way the agent is ended before this returns.
        """
        if self.state is not SessionState.SPAWNED:
            raise RuntimeError(f"ACP session: probe in state {self.state.value}")
        init = await self._start_step(handshake.initialize, None, ClientServices())
        with anyio.CancelScope(shield=True):
            await self.end()
        return init

    async def _start_step(
        self,
        step: Callable[[Peer], Awaitable[_T]],
        turn: TurnState | None,
        services: ClientServices,
    ) -> _T:
        """One step of the start, read for ``turn``; a failure ends the agent and raises
        the error the agent's answer means (see :meth:`open`)."""
        try:
            async with self.serving(turn, services=services):
                return await step(self._peer)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                error = await self._start_failed(exc)
            if error is not None:
                raise error from exc
            raise

    async def _start_failed(self, exc: BaseException) -> OMAError | None:
        if isinstance(exc, ConnectionClosedError):
            return await self._crashed(exc)
        await self.end()
        if isinstance(exc, WireError):
            if exc.rpc_code == AUTH_REQUIRED:
                return auth_error(self._label, exc)
            return BackendError(
                f'ACP agent "{self._label}" failed to start: error {exc.rpc_code}: '
                f"{redact(exc.message)}"
            )
        if isinstance(exc, ValidationError):
            return BackendError(
                f'ACP agent "{self._label}" sent a malformed answer during start-up'
            )
        return None

    # -- READY -> PROMPTING -> READY ------------------------------------------------------

    async def prompt(self, turn: TurnState, params: dict[str, Any]) -> Any:
        """One ``session/prompt`` of ``turn``; the agent's answer.

        Its updates go to ``turn`` in wire order.  Cancelled, the cancel steps
        run (shielded) and the cancellation goes on.  The agent's error
        answer raises a ``BackendError`` (the session stays ``READY``); a
        connection that dies raises one with the exit status and the
        agent's last words, and the session is ``DEAD``.
        """
        if not self.live:
            raise self._closed_error()
        self._to(SessionState.PROMPTING)
        self.turn = turn
        try:
            return await self._prompt(turn, params)
        finally:
            self.turn = None

    async def _prompt(self, turn: TurnState, params: dict[str, Any]) -> Any:
        call: PendingCall | None = None
        answer: Any = None
        failure: BaseException | None = None
        try:
            async with self.serving(turn):
                # Let the reader take what already waits (late updates of an
                # earlier turn, commands announced after session/new) before
                # this turn starts counting text.
                for _ in range(3):
                    await anyio.lowlevel.checkpoint()
                turn.prompt_sent()
                call = await self._peer.start_request("session/prompt", params)
                try:
                    answer = await call.wait()
                except _PROMPT_FAILURES as exc:
                    failure = exc
                turn.answered()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._cancel(turn, call)
                await turn.updates.flush()  # the partial output reaches the stream
            raise
        except (*_PROMPT_FAILURES, anyio.ClosedResourceError) as exc:
            failure = exc  # the prompt could not even be written
        await turn.updates.flush()
        if failure is not None:
            raise await self._prompt_failed(failure)
        self._settled()
        return answer

    async def _prompt_failed(self, failure: BaseException) -> OMAError:
        if isinstance(failure, WireError) and not isinstance(failure, ConnectionClosedError):
            self._settled()  # the agent refused this prompt; the session is fine
            if failure.rpc_code == AUTH_REQUIRED:
                return auth_error(self._label, failure)
            return BackendError(
                f'ACP agent "{self._label}" answered session/prompt with error '
                f"{failure.rpc_code}: {redact(failure.message)}"
            )
        return await self._crashed(failure)

    # -- PROMPTING -> CANCELLING -> READY | DEAD --------------------------------------------

    async def _cancel(self, turn: TurnState, call: PendingCall | None) -> None:
        """The turn-cancel steps; called shielded, once the turn's serving block ended."""
        turn.cancelling()
        ended = call is None
        if self.live:
            self._to(SessionState.CANCELLING)
            async with self.serving(turn):
                if self.session_id is not None:
                    await self._peer.notify_quietly(
                        "session/cancel", {"sessionId": self.session_id}
                    )
                await self._peer.answer_pending(self._cancelled_answer)
                await self._requests.release(turn.run_id)
                if call is not None:
                    with anyio.move_on_after(self._cancel_grace_s):
                        # cancelled, end_turn, -32800 or any error: the turn is over.
                        with contextlib.suppress(Exception):
                            await call.wait()
                        ended = True
                    if not ended:
                        call.abandon()
        if not ended or self._peer.closed.is_set():
            logger.warning("ACP agent %s: turn did not end after cancel; ending it", self._label)
            await self.end(turn.run_id)
        else:
            self._settled()

    def _cancelled_answer(self, request_id: RequestId, method: str) -> Message | None:
        """The answer to a request of the agent still held when its turn is cancelled."""
        core = self._peer.core
        if method == "session/request_permission":
            return core.respond(request_id, CANCELLED_OUTCOME)
        if method == "elicitation/create":
            return core.respond(request_id, CANCEL)
        return core.respond_error(request_id, REQUEST_CANCELLED, "Request cancelled")

    # -- READY: a turn cut off on an earlier connection -----------------------------------

    async def cancel_cut_off_turn(self, quiet_s: float = CUT_OFF_QUIET_S) -> None:
        """End the turn of this session that an earlier connection lost, before a new one.

        The agent (a remote one, whose connection was cut mid-turn) may still
        be running the turn the lost connection asked for: its run already
        failed here, and its remaining updates carry no turn of their own, so
        they would join the next turn's.  ``session/cancel`` ends it; what it
        still sends is read and dropped until it is quiet for ``quiet_s``
        (at most ``cancel_grace_s``), and its requests are refused as late.
        """
        if self.state is not SessionState.READY:
            raise RuntimeError(f"ACP session: cancel of a cut-off turn in {self.state.value}")
        async with self.serving():
            await self._peer.notify_quietly("session/cancel", {"sessionId": self.session_id})
            with anyio.move_on_after(self._cancel_grace_s):
                while True:
                    seen = self._received
                    await anyio.sleep(quiet_s)
                    if self._received == seen:
                        break
        logger.info("ACP agent %s: the turn an earlier connection lost was cancelled", self._label)

    # -- requests of the session ----------------------------------------------------------

    async def start_request(self, method: str, params: dict[str, Any]) -> PendingCall:
        """Send a request of the session (its ``sessionId`` added); the reader is whoever
        reads now (the turn's)."""
        return await self._peer.start_request(method, {**params, "sessionId": self.session_id})

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """Send a request of the session and wait for its answer (inside :meth:`serving`)."""
        return await self._peer.request(method, {**params, "sessionId": self.session_id})

    # -- -> DEAD ------------------------------------------------------------------------------

    async def end(self, run_id: str | None = None) -> None:
        """End the agent's whole tree: pending requests fail, its terminals are released.

        Safe to call again (a close while a run ends its agent): each call
        returns once the agent is gone.
        """
        self._to(SessionState.DEAD)
        self._peer.fail_all(ConnectionClosedError("agent ended"))
        await self._requests.close_terminals()
        await self._transport.close(self._stop_grace_s)
        await self._requests.release_client_terminals(run_id)

    async def _crashed(self, failure: BaseException) -> BackendError:
        """The connection died: collect the exit status and the agent's last words, end it."""
        with anyio.CancelScope(shield=True):
            await self._transport.wait_gone(2)
            # Described before the tree is ended: our own SIGTERM is not the cause.
            message = f'ACP agent "{self._label}" {self._transport.describe_end()}'
            await self.end(self.turn.run_id if self.turn is not None else None)
        reason = str(failure)
        if reason and reason != "connection closed":
            message += f" ({redact(reason)})"
        tail = self._transport.diagnostics()
        return BackendError(f"{message}: {tail}" if tail else message)

    # -- the connection -------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def serving(
        self,
        turn: TurnState | None = None,
        *,
        side: Emit | None = None,
        services: ClientServices | None = None,
    ) -> AsyncIterator[None]:
        """Read the agent for the duration of the block.

        Its updates go to ``turn`` (else to ``side``, else they are dropped);
        its requests are answered for ``turn`` with ``services`` (default:
        the turn's).  Requests still held when the block ends (a turn that
        ended without awaiting them) are answered at once, so the agent never
        waits on a client that stopped listening; on cancellation the cancel
        steps answer them, after ``session/cancel``.
        """
        if services is None:
            services = turn.services if turn is not None else ClientServices()
        bound = self._listener, self._side, self._services
        self._listener, self._side, self._services = turn, side, services
        cancelled = False
        try:
            async with self._peer.pumping():
                yield
        except anyio.get_cancelled_exc_class():
            cancelled = True
            raise
        finally:
            self._listener, self._side, self._services = bound
            peer = self._peer
            if not cancelled and peer.pending_requests() and not peer.closed.is_set():
                with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                    await peer.answer_pending(self._cancelled_answer)

    async def _receive(self) -> object | None:
        message = await self._transport.receive()
        self._received += 1
        if not (isinstance(message, dict) and message.get("method") == "session/update"):
            await self._flush_text()
        return message

    async def _flush_text(self) -> None:
        turn = self._listener
        if turn is not None and not turn.finished:
            await turn.updates.flush()

    def _on_invalid(self, event: Event) -> None:
        logger.warning("ACP agent %s: %s message: %s", self._label, event.kind, event.detail)

    async def _on_request(self, method: str, params: Any) -> Any:
        # Read when the request is taken up, inside the serving block it came in.
        turn, services = self._listener, self._services
        return await self._requests.answer(
            method, params if isinstance(params, dict) else {}, turn, services
        )

    async def _on_notification(self, method: str, params: Any) -> None:
        if not isinstance(params, dict):
            return
        if method == "elicitation/complete":
            await self._requests.completed(params, self._services)
            return
        update = params.get("update")
        if method != "session/update" or not isinstance(update, dict):
            return
        session_id = params.get("sessionId")
        if self.session_id is not None and session_id != self.session_id:
            logger.debug("ACP agent %s: update for unknown session %r", self._label, session_id)
            return
        turn = self._listener
        if turn is None or turn.finished:
            if self._side is not None:
                await self._side(event_of_update(update))
                return
            logger.debug(
                "ACP agent %s: late update dropped: %s", self._label, update.get("sessionUpdate")
            )
            return
        await turn.updates.on_update(update)
