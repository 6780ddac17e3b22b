"""``AcpBackend``: one ACP agent process and one protocol session, reused across runs.

Lifecycle (docs/contract.md §11.23, §11.32-36; docs/decisions.md, D3-D9):

* **Lazy start.** The first run spawns the agent (own process group), sends
  ``initialize`` (protocol 1, client info, the capabilities the profile
  really serves), ``authenticate`` only with the profile's ``auth_method``
  when the agent advertises it, then ``session/new`` (or ``session/resume`` /
  ``session/load`` after a respawn, when advertised), then applies the
  profile's model.  A pre-cancelled run never spawns (docs/decisions.md, D5); a cancel or a
  failure during start-up ends the half-started agent, and the next run
  starts afresh.
* **A run is one ``session/prompt``** with one text block (and the run's
  ``meta`` as its ``_meta``); the system prompt goes with the first turn of a
  session only.
* **Cancel.** ``session/cancel``, every held permission request answered
  ``cancelled``, then up to ``cancel_grace_s`` for the turn to end (any
  answer or error ends it); past that the agent's tree is ended and the next
  run respawns it.  The run itself always ends cancelled (docs/decisions.md, D3).
* **Crash or stdout EOF** fails every pending request and the run (exit
  status and stderr tail in the message); the next run respawns.
* :meth:`AcpBackend.aclose` ends the whole process tree.

Why the connection is pumped only while a run (or a start, or a cancel) waits
on it: a backend outlives any one task, and anyio task groups cannot be kept
open across calls.  Between runs nothing reads the agent's pipes; what it
writes meanwhile waits in the pipe.  Updates that arrive before the prompt
is sent reach the run's stream raw, except message and tool updates (a
``session/load`` replay, late ones of the previous turn); updates after the
turn's answer are dropped as late.  stderr needs no reader: the supervisor
drains it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel
from pydantic import ValidationError

from oma_bridge._version import __version__
from oma_bridge.backends import (
    BackendKind,
    BackendOutcome,
    ElicitationCompleteHandler,
    ElicitationRequest,
    Emit,
    PermissionRequest,
    RunContext,
)
from oma_bridge.backends.acp.client_methods import ClientMethods
from oma_bridge.backends.acp.config import ACP_BACKENDS, AcpConfig
from oma_bridge.backends.acp.schema import InitializeResponse, PromptResponse, SessionResponse
from oma_bridge.backends.acp.stdio import AgentProcess
from oma_bridge.backends.acp.terminal import Terminals
from oma_bridge.backends.acp.turn import Turn, event_of_update
from oma_bridge.backends.elicitation import CANCEL, valid_answer
from oma_bridge.backends.permissions import (
    CANCELLED_OUTCOME,
    choose_option,
    parse_options,
    selected,
)
from oma_bridge.errors import (
    AuthRequiredError,
    BackendError,
    OMAError,
    RefusedError,
    RunTimeoutError,
    WireError,
)
from oma_bridge.messages import last_user_text
from oma_bridge.observe import report
from oma_bridge.redaction import redact
from oma_bridge.results import TokenUsage
from oma_bridge.rpc import (
    ConnectionClosedError,
    Event,
    Message,
    Peer,
    PendingCall,
    RequestId,
)
from oma_bridge.rpc.codes import (
    ACP_PROTOCOL_VERSION,
    AUTH_REQUIRED,
    METHOD_NOT_FOUND,
    REQUEST_CANCELLED,
)

__all__ = ["AcpBackend"]

logger = logging.getLogger(__name__)

_CLIENT_NAME = "oma-bridge"


@dataclass
class _Live:
    """One spawned agent: its process, its connection, what it said at start."""

    process: AgentProcess
    peer: Peer
    init: InitializeResponse | None = None
    session_id: str | None = None
    #: The connection ended or the process was ended: never reuse it.
    dead: bool = False


class AcpBackend:
    """The live ACP backend of one agent (see the module docstring)."""

    kind: BackendKind = "acp"

    def __init__(self, config: AcpConfig, *, agent_name: str | None = None) -> None:
        self.config = config
        self.label = agent_name or "agent"
        self._cwd = config.resolved_cwd()
        self._terminals = Terminals(self._cwd, labels=config.labels)
        #: fs/* and terminal/*, served here or by a client (client_methods.py).
        self._client_methods = ClientMethods(
            config, self._cwd, self._terminals, label=self.label, who=self._who
        )
        self._lock = anyio.Lock()
        self._live: _Live | None = None
        #: The session to resume after a respawn, when the agent can.
        self._previous_session: str | None = config.resume_session
        self._session_is_fresh = True
        self._usage_baseline = 0
        self._turn: Turn | None = None
        self._turn_counter = 0
        self._ctx: RunContext | None = None
        self._cancelling = False
        self._closed = False
        #: Where updates go that arrive while a request outside a turn reads the agent.
        self._side_emit: Emit | None = None
        #: Told of ``elicitation/complete``: the last run's, kept between runs (the
        #: agent may finish a URL elicitation while a setting is being sent).
        self._elicitation_complete: ElicitationCompleteHandler | None = None

    # -- public ------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The pid of the running agent (its process group id), if any."""
        live = self._live
        return live.process.pid if live is not None and not live.dead else None

    @property
    def session_id(self) -> str | None:
        live = self._live
        return live.session_id if live is not None and not live.dead else None

    async def run(self, ctx: RunContext) -> BackendOutcome:
        text = last_user_text(ctx.messages, "\n").strip()
        if not text:
            raise BackendError(f'ACP backend "{self.label}" received an empty prompt.')
        # docs/decisions.md, D5: a run cancelled before it starts never spawns anything.
        await anyio.lowlevel.checkpoint_if_cancelled()
        if self._closed:
            raise BackendError(f'ACP agent "{self.label}" is closed')
        async with self._lock:
            if self._closed:
                raise BackendError(f'ACP agent "{self.label}" is closed')
            self._turn_counter += 1
            turn = Turn(self._turn_counter, ctx.emit, coalesce=self.config.coalesce_text)
            self._turn, self._ctx = turn, ctx
            self._client_methods.forwarder = ctx.client_forwarder
            self._client_methods.run_id = ctx.run_id
            self._elicitation_complete = ctx.elicitation_complete_handler
            try:
                with anyio.move_on_after(self.config.timeout_s):
                    return await self._run_turn(ctx, turn, text)
                # The profile's timeout_s fired; the turn was cancelled as a caller cancel is.
                assert self.config.timeout_s is not None
                raise RunTimeoutError.for_agent(self.label, round(self.config.timeout_s * 1000))
            finally:
                turn.finished = True
                self._turn, self._ctx, self._cancelling = None, None, False
                self._client_methods.run_id = None
                turn.over.set()

    async def session_request(
        self, method: str, params: dict[str, Any], *, emit: Emit | None = None
    ) -> Any:
        """Send a request of the session (``session/set_mode``, ``session/set_config_option``).

        ``params`` get the agent's own ``sessionId``; the rest goes as it is,
        and the agent's answer (or its error, a ``WireError``) comes back
        unchanged.  During a turn the request goes at once (the turn reads
        the connection); between turns the agent is started first if it is
        not running, and read for as long as the request takes, with the
        updates it sends meanwhile given to ``emit`` (else dropped).
        """
        if self._closed:
            raise BackendError(f'ACP agent "{self.label}" is closed')
        live, turn = self._live, self._turn
        if live is not None and not live.dead and turn is not None and not turn.finished:
            call = await live.peer.start_request(method, {**params, "sessionId": live.session_id})
            answered = await self._during_turn(call, turn)
            if answered:
                return await call.wait()
            async with self._lock, self._serving(live):  # the turn ended first: read on
                return await call.wait()
        async with self._lock:
            if self._closed:
                raise BackendError(f'ACP agent "{self.label}" is closed')
            live = self._live
            if live is not None and not live.dead and live.process.returncode is not None:
                await self._end(live)
            if self._live is None or self._live.dead:
                live = await self._start()
            assert live is not None
            self._side_emit = emit
            try:
                async with self._serving(live):
                    return await live.peer.request(method, {**params, "sessionId": live.session_id})
            finally:
                self._side_emit = None

    @staticmethod
    async def _during_turn(call: PendingCall, turn: Turn) -> bool:
        """Wait for ``call``'s answer while ``turn`` reads it; ``False`` if the turn ends first."""
        answered = False
        async with anyio.create_task_group() as tg:

            async def settle() -> None:
                nonlocal answered
                with contextlib.suppress(Exception):  # the error is read again by the caller
                    await call.wait()
                answered = True
                tg.cancel_scope.cancel()

            tg.start_soon(settle)
            await turn.over.wait()
            tg.cancel_scope.cancel()
        return answered

    async def aclose(self) -> None:
        """End the agent's whole process tree (no process of it survives).

        A run in flight loses its agent (its turn fails or ends at once); a
        run still starting one notices the close and ends what it started,
        and ``aclose`` waits for that (bounded by ``stop_grace_s`` + 2 s).
        """
        self._closed = True
        with anyio.CancelScope(shield=True):
            await self._end_current()
            with anyio.move_on_after(self.config.stop_grace_s + 2):
                async with self._lock:
                    pass
            await self._end_current()

    async def _end_current(self) -> None:
        live = self._live
        if live is not None:
            await self._end(live)
        await self._terminals.close_all()
        await self._client_methods.release_client_terminals()

    # -- one run -------------------------------------------------------------------

    async def _run_turn(self, ctx: RunContext, turn: Turn, text: str) -> BackendOutcome:
        live = self._live
        if live is not None and not live.dead and live.process.returncode is not None:
            # It died while idle: nothing of this run is lost, so start it again.
            logger.warning(
                "ACP agent %s %s while idle; respawning",
                self.label,
                live.process.exit_description(),
            )
            await self._end(live)
        if live is None or live.dead:
            live = await self._start()
        assert live.session_id is not None
        if self._session_is_fresh and ctx.system_prompt and ctx.system_prompt.strip():
            text = f"{ctx.system_prompt.strip()}\n\n{text}"
        # The system prompt is consumed by the first prompt sent, even if it fails.
        self._session_is_fresh = False
        params: dict[str, Any] = {
            "sessionId": live.session_id,
            "prompt": [{"type": "text", "text": text}],
        }
        if ctx.meta:
            params["_meta"] = dict(ctx.meta)  # the caller's, as given (trace context, say)
        call: PendingCall | None = None
        answer: Any = None
        failure: BaseException | None = None
        try:
            async with self._serving(live):
                # Let the reader take what already waits in the pipe (late
                # updates of an earlier turn, commands announced after
                # session/new) before this turn starts counting text.
                for _ in range(3):
                    await anyio.lowlevel.checkpoint()
                turn.prompting = True
                call = await live.peer.start_request("session/prompt", params)
                try:
                    answer = await call.wait()
                except (WireError, OSError, anyio.BrokenResourceError) as exc:
                    failure = exc
                turn.finished = True
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._cancel_turn(live, call)
                await turn.flush()  # the partial output reaches the stream
            raise
        except (WireError, OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            failure = exc  # the prompt could not even be written
        await turn.flush()
        if failure is not None:
            raise await self._turn_failed(live, failure)
        if turn.emit_error is not None:
            raise turn.emit_error  # the consumer failed; the agent and its session are fine
        return self._outcome(turn, answer)

    def _outcome(self, turn: Turn, answer: Any) -> BackendOutcome:
        try:
            stop_reason = PromptResponse.model_validate(answer).stop_reason
        except ValidationError:
            logger.warning("ACP agent %s: malformed session/prompt answer", self.label)
            stop_reason = "end_turn"
        output = turn.output
        outcome = BackendOutcome(
            output=output,
            messages=[{"role": "assistant", "content": [{"type": "text", "text": output}]}]
            if output
            else [],
            token_usage=TokenUsage(input_tokens=self._telescope(turn.last_used)),
            tool_calls=turn.tool_calls,
        )
        if stop_reason == "refusal":
            message = f'ACP agent "{self.label}" refused the task'
            outcome.error = RefusedError(f"{message}: {output}" if output else f"{message}.")
        elif stop_reason in ("max_tokens", "max_turn_requests"):
            outcome.budget_exceeded = True
        elif stop_reason == "cancelled":
            outcome.cancelled = True
        elif stop_reason != "end_turn":
            logger.warning("ACP agent %s: unknown stop reason %r", self.label, stop_reason)
        return outcome

    def _telescope(self, used: int | None) -> int:
        """Input tokens of a turn: the growth of the session's context since the last turn."""
        if used is None:
            return 0
        grown = max(0, used - self._usage_baseline)
        self._usage_baseline = used
        return grown

    async def _turn_failed(self, live: _Live, failure: BaseException) -> OMAError:
        if isinstance(failure, WireError) and not isinstance(failure, ConnectionClosedError):
            if failure.rpc_code == AUTH_REQUIRED:
                return self._auth_error(failure)
            # The agent refused this prompt; the session itself is still fine.
            return BackendError(
                f'ACP agent "{self.label}" answered session/prompt with error '
                f"{failure.rpc_code}: {redact(failure.message)}"
            )
        return await self._crashed(live, failure)

    # -- cancel ---------------------------------------------------------------------

    async def _cancel_turn(self, live: _Live, call: PendingCall | None) -> None:
        """The turn-cancel protocol; called shielded, after the run's serving ended."""
        self._cancelling = True
        ended = call is None
        if not live.dead and self._live is live:
            async with self._serving(live):
                if live.session_id is not None:
                    await live.peer.notify_quietly("session/cancel", {"sessionId": live.session_id})
                await live.peer.answer_pending(self._cancelled_answer(live.peer))
                await self._terminals.close_all()
                await self._client_methods.release_client_terminals()
                if call is not None:
                    with anyio.move_on_after(self.config.cancel_grace_s):
                        # cancelled, end_turn, -32800 or any error: the turn is over.
                        with contextlib.suppress(Exception):
                            await call.wait()
                        ended = True
                    if not ended:
                        call.abandon()
        if not ended or live.peer.closed.is_set():
            logger.warning("ACP agent %s: turn did not end after cancel; ending it", self.label)
            await self._end(live)

    @staticmethod
    def _cancelled_answer(peer: Peer) -> Any:
        def answer(request_id: RequestId, method: str) -> Message | None:
            if method == "session/request_permission":
                return peer.core.respond(request_id, CANCELLED_OUTCOME)
            if method == "elicitation/create":
                return peer.core.respond(request_id, CANCEL)
            return peer.core.respond_error(request_id, REQUEST_CANCELLED, "Request cancelled")

        return answer

    # -- start-up ----------------------------------------------------------------------

    async def _start(self) -> _Live:
        config = self.config
        try:
            process = await AgentProcess.spawn(
                config.command,
                config.args,
                env=config.env,
                cwd=str(self._cwd),
                labels=config.labels,
                max_line_bytes=config.max_line_bytes,
            )
        except OSError as exc:
            raise BackendError(f'ACP agent "{self.label}" could not be started: {exc}') from exc
        live = _Live(process, self._make_peer(process))
        self._live = live
        if self._closed:  # closed while the spawn was under way
            await self._end(live)
            raise BackendError(f'ACP agent "{self.label}" is closed')
        try:
            async with self._serving(live):
                await self._handshake(live)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                error = await self._start_failed(live, exc)
            if error is not None:
                raise error from exc
            raise
        return live

    async def _start_failed(self, live: _Live, exc: BaseException) -> OMAError | None:
        if isinstance(exc, ConnectionClosedError):
            return await self._crashed(live, exc)
        await self._end(live)
        if isinstance(exc, WireError):
            if exc.rpc_code == AUTH_REQUIRED:
                return self._auth_error(exc)
            return BackendError(
                f'ACP agent "{self.label}" failed to start: error {exc.rpc_code}: '
                f"{redact(exc.message)}"
            )
        if isinstance(exc, ValidationError):
            return BackendError(f'ACP agent "{self.label}" sent a malformed answer during start-up')
        return None

    async def _handshake(self, live: _Live) -> None:
        peer, config = live.peer, self.config
        serve_fs = config.fs in ("cwd", "client")
        raw = await peer.request(
            "initialize",
            {
                "protocolVersion": ACP_PROTOCOL_VERSION,
                "clientCapabilities": {
                    "fs": {"readTextFile": serve_fs, "writeTextFile": serve_fs},
                    "terminal": config.terminal is not False,
                    # Always: an elicitation nobody can answer is answered
                    # "cancel", which the agent handles as a user would.
                    "elicitation": {"form": {}, "url": {}},
                },
                "clientInfo": {"name": _CLIENT_NAME, "title": self.label, "version": __version__},
            },
        )
        init = live.init = InitializeResponse.model_validate(raw)
        if init.protocol_version != ACP_PROTOCOL_VERSION:
            raise BackendError(
                f'ACP agent "{self.label}" speaks protocol version {init.protocol_version}; '
                f"oma-bridge speaks {ACP_PROTOCOL_VERSION}"
            )
        if config.auth_method is not None and config.auth_method in init.auth_method_ids():
            try:
                await peer.request("authenticate", {"methodId": config.auth_method})
            except WireError as exc:
                if isinstance(exc, ConnectionClosedError):
                    raise
                raise self._auth_error(exc) from exc
        session = await self._open_session(live, init)
        live.session_id = session.session_id
        if config.model is not None:
            await self._apply_model(live, session, config.model)

    async def _open_session(self, live: _Live, init: InitializeResponse) -> SessionResponse:
        base = {"cwd": str(self._cwd), "mcpServers": list(self.config.mcp_servers)}
        previous = self._previous_session
        caps = init.agent_capabilities
        why = ""
        if previous is not None:
            # Continue the old session: resume (no replay) first, then load.
            methods = [
                method
                for method, offered in (
                    ("session/resume", caps.session_capability("resume")),
                    ("session/load", caps.load_session),
                )
                if offered
            ]
            why = "the agent advertises neither session/resume nor session/load"
            failures = []
            for method in methods:
                try:
                    raw = await live.peer.request(method, {"sessionId": previous, **base})
                except WireError as exc:
                    if isinstance(exc, ConnectionClosedError):
                        raise
                    logger.info("ACP agent %s: %s failed (%s)", self.label, method, exc.message)
                    failures.append(f"{method} failed with error {exc.rpc_code}: {exc.message}")
                    continue
                session = SessionResponse.model_validate(raw or {})
                session.session_id = previous
                return session
            why = "; ".join(failures) or why
        raw = await live.peer.request("session/new", base)
        session = SessionResponse.model_validate(raw)
        if not session.session_id:
            raise BackendError(f'ACP agent "{self.label}" answered session/new without sessionId')
        if previous is not None:
            self._not_continued(previous, session.session_id, why)
        self._previous_session = session.session_id
        self._session_is_fresh = True
        self._usage_baseline = 0
        return session

    def _not_continued(self, previous: str, new: str, why: str) -> None:
        """Say that the agent's earlier session is lost: logged, and a ``note`` to the observers
        (the daemon journals it, PROTOCOL §13.4; docs/decisions.md, D21)."""
        text = (
            f'ACP agent "{self.label}": its earlier session {previous} could not be continued '
            f"({' '.join(redact(why).split())}); a new session {new} started, and the agent "
            "does not remember the earlier turns"
        )
        logger.warning("%s", text)
        report("note", text=text, **self._who())

    async def _apply_model(self, live: _Live, session: SessionResponse, model: str) -> None:
        option_id = session.model_option_id()
        if option_id is not None:
            params = {"sessionId": live.session_id, "configId": option_id, "value": model}
            await live.peer.request("session/set_config_option", params)
        else:
            await live.peer.request(
                "session/set_model", {"sessionId": live.session_id, "modelId": model}
            )

    def _auth_error(self, exc: WireError) -> AuthRequiredError:
        return AuthRequiredError(
            f'ACP agent "{self.label}" requires authentication: {redact(exc.message)}'
        )

    # -- the end of an agent ---------------------------------------------------------------

    async def _crashed(self, live: _Live, failure: BaseException) -> BackendError:
        """The connection died: collect exit status and stderr tail, end the tree."""
        with anyio.CancelScope(shield=True):
            await live.process.wait_exit(2)
            # Described before the tree is ended: our own SIGTERM is not the cause.
            message = f'ACP agent "{self.label}" {live.process.exit_description()}'
            await self._end(live)
        reason = str(failure)
        if reason and reason != "connection closed":
            message += f" ({redact(reason)})"
        tail = live.process.stderr_tail()
        return BackendError(f"{message}: {tail}" if tail else message)

    async def _end(self, live: _Live) -> None:
        live.dead = True
        live.peer.fail_all(ConnectionClosedError("agent ended"))
        if self._live is live:
            self._live = None
        await self._terminals.close_all()
        await live.process.terminate(self.config.stop_grace_s)
        await self._client_methods.release_client_terminals()

    # -- the connection ----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _serving(self, live: _Live) -> AsyncIterator[None]:
        """Read the agent's stdout for the duration of the block (stderr drains by itself).

        Requests of the agent still held when the block ends (a turn that
        ended without awaiting them) are answered at once, so the agent
        never waits on a client that stopped listening.  On cancellation the
        cancel protocol answers them, after ``session/cancel``.
        """
        cancelled = False
        try:
            async with live.peer.pumping():
                yield
        except anyio.get_cancelled_exc_class():
            cancelled = True
            raise
        finally:
            if not cancelled and live.peer.pending_requests() and not live.peer.closed.is_set():
                with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                    await live.peer.answer_pending(self._cancelled_answer(live.peer))

    def _make_peer(self, process: AgentProcess) -> Peer:
        # Text chunks are joined per read (see Turn.flush): flush before
        # waiting on the agent, and before anything but an update.
        process.messages.before_wait = self._flush_text

        async def receive() -> object | None:
            message = await process.receive()
            if not (isinstance(message, dict) and message.get("method") == "session/update"):
                await self._flush_text()
            return message

        return Peer(
            process.send_line,
            receive,
            on_request=self._on_request,
            on_notification=self._on_notification,
            on_invalid=self._on_invalid,
        )

    async def _flush_text(self) -> None:
        turn = self._turn
        if turn is not None and not turn.finished:
            await turn.flush()

    def _on_invalid(self, event: Event) -> None:
        logger.warning("ACP agent %s: %s message: %s", self.label, event.kind, event.detail)

    async def _on_notification(self, method: str, params: Any) -> None:
        if method == "elicitation/complete" and isinstance(params, dict):
            await self._on_elicitation_complete(params)
            return
        if method != "session/update" or not isinstance(params, dict):
            return
        update = params.get("update")
        turn = self._turn
        if not isinstance(update, dict):
            return
        live = self._live
        session_id = params.get("sessionId")
        known = live is not None and live.session_id is not None
        if known and live is not None and session_id != live.session_id:
            logger.debug("ACP agent %s: update for unknown session %r", self.label, session_id)
            return
        if turn is None or turn.finished:
            if self._side_emit is not None:
                await self._side_emit(event_of_update(update))
                return
            logger.debug(
                "ACP agent %s: late update dropped: %s", self.label, update.get("sessionUpdate")
            )
            return
        await turn.on_update(update)

    async def _on_request(self, method: str, params: Any) -> Any:
        if not isinstance(params, dict):
            params = {}
        if method == "session/request_permission":
            return await self._on_permission(params)
        if method == "elicitation/create":
            return await self._on_elicitation(params)
        if self._client_methods.serves(method):
            return await self._client_methods.handle(method, params)
        raise WireError(METHOD_NOT_FOUND, f"Method not found: {method}")

    def _who(self) -> dict[str, str]:
        """Whose the agent is, for the observers (the daemon's labels, ``agentId``)."""
        agent_id = self.config.labels.get("agentId")
        return {"agentId": agent_id} if agent_id else {}

    async def _on_permission(self, params: dict[str, Any]) -> Any:
        options = parse_options(params.get("options"))
        turn, ctx = self._turn, self._ctx
        if turn is None or ctx is None or turn.finished or self._cancelling:
            return CANCELLED_OUTCOME
        policy = self.config.permission
        raw_call = params.get("toolCall")
        tool_call = {
            key: raw_call[key]
            for key in ("toolCallId", "title", "kind", "rawInput")
            if isinstance(raw_call, dict) and key in raw_call
        }
        if policy in ("auto-approve", "reject"):
            # The profile decides: reported as the policy's decision (the audit log).
            chosen = choose_option(options, "allow" if policy == "auto-approve" else "reject")
            report(
                "permission",
                runId=ctx.run_id,
                toolCall={k: v for k, v in tool_call.items() if k != "rawInput"},
                options=[option.option_id for option in options],
                outcome={"outcome": "selected", "optionId": chosen}
                if chosen is not None
                else {"outcome": "cancelled"},
                decidedBy="policy",
                **self._who(),
            )
            return selected(chosen)
        least = choose_option(options, "reject")
        if ctx.permission_handler is None:
            return selected(least)
        request = PermissionRequest(
            self.label,
            ctx.run_id,
            tool_call,
            options,
            acp_params={key: value for key, value in params.items() if key != "sessionId"},
        )
        try:
            with anyio.move_on_after(self.config.permission_timeout_s) as waited:
                choice = await ctx.permission_handler(request)
            if waited.cancelled_caught:
                logger.info("ACP agent %s: permission request timed out", self.label)
                return selected(least)
        except Exception:
            logger.exception("ACP agent %s: permission handler failed", self.label)
            return selected(least)
        if choice is not None and choice not in {o.option_id for o in options}:
            logger.warning("ACP agent %s: permission answer %r is no option", self.label, choice)
            return selected(least)
        return selected(choice)

    async def _on_elicitation_complete(self, params: dict[str, Any]) -> None:
        """Pass the agent's ``elicitation/complete`` on as it is; without a handler, drop it."""
        handler = self._elicitation_complete
        if handler is None or not isinstance(params.get("elicitationId"), str):
            logger.debug("ACP agent %s: elicitation/complete dropped", self.label)
            return
        try:
            await handler(params)
        except Exception:
            logger.exception("ACP agent %s: elicitation complete handler failed", self.label)

    async def _on_elicitation(self, params: dict[str, Any]) -> dict[str, Any]:
        """Ask the run's elicitation handler; ``cancel`` when nobody can answer."""
        turn, ctx = self._turn, self._ctx
        asked = {k: v for k, v in params.items() if k not in ("sessionId", "requestId")}
        request = ElicitationRequest(self.label, ctx.run_id if ctx else None, asked)
        handler = ctx.elicitation_handler if ctx is not None else None
        if turn is None or turn.finished or self._cancelling or handler is None:
            report(
                "elicitation",
                runId=request.run_id,
                mode=request.mode,
                action="cancel",
                decidedBy="no-client",
                **self._who(),
            )
            return CANCEL
        try:
            with anyio.move_on_after(self.config.permission_timeout_s) as waited:
                answer = await handler(request)
            if waited.cancelled_caught:
                logger.info("ACP agent %s: elicitation timed out", self.label)
                return CANCEL
        except Exception:
            logger.exception("ACP agent %s: elicitation handler failed", self.label)
            return CANCEL
        valid = valid_answer(answer)
        if valid is None:
            logger.warning("ACP agent %s: malformed elicitation answer taken as cancel", self.label)
            return CANCEL
        return valid


ACP_BACKENDS.fill(lambda config, agent_name: AcpBackend(config, agent_name=agent_name))
