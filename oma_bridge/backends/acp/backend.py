"""``AcpBackend``: one ACP agent behind the ``Backend`` seam, its session reused across runs.

Lifecycle (docs/contract.md §11.23, §11.32-36; docs/decisions.md, D3-D9):

* **Lazy start.** The first run connects to the agent (spawns it in its own
  process group, by default) and opens an :class:`~oma_bridge.backends.acp.session.AcpSession`
  (``handshake.py``: ``initialize``, ``authenticate`` when asked for,
  ``session/new``, or ``session/resume`` / ``session/load`` of the earlier
  session after a respawn, then the profile's model).  A pre-cancelled run
  never spawns (docs/decisions.md, D5); a cancel or a failure during
  start-up ends the half-started agent, and the next run starts afresh.
* **A run is one ``session/prompt``** with one text block (and the run's
  ``meta`` as its ``_meta``) and one :class:`~oma_bridge.backends.acp.turn_state.TurnState`;
  the system prompt goes with the first turn of a session only.
* **Cancel.** The session's cancel steps: ``session/cancel``, every held
  request answered ``cancelled``, then up to ``cancel_grace_s`` for the turn
  to end (any answer or error ends it); past that the agent's tree is ended
  and the next run respawns it.  The run itself always ends cancelled
  (docs/decisions.md, D3).
* **Crash or end of input** fails every pending request and the run (exit
  status and stderr tail in the message); the next run respawns.
* :meth:`AcpBackend.aclose` ends the whole process tree.

The states of the session and why it is read only while someone waits on
it: ``session.py``.  stderr needs no reader: the supervisor drains it.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel

from oma_bridge.backends import BackendKind, BackendOutcome, Emit, RunContext
from oma_bridge.backends.acp.agent_requests import AgentRequests
from oma_bridge.backends.acp.capabilities import advertised_of
from oma_bridge.backends.acp.command_check import check_command_sha256
from oma_bridge.backends.acp.config import ACP_BACKENDS, AcpConfig
from oma_bridge.backends.acp.handshake import Handshake, Opened
from oma_bridge.backends.acp.outcome import outcome_of
from oma_bridge.backends.acp.schema import InitializeResponse
from oma_bridge.backends.acp.services import ClientServices
from oma_bridge.backends.acp.session import AcpSession
from oma_bridge.backends.acp.stdio import AgentProcess
from oma_bridge.backends.acp.terminal import Terminals
from oma_bridge.backends.acp.transport import Connect
from oma_bridge.backends.acp.turn import Turn
from oma_bridge.backends.acp.turn_state import TurnState
from oma_bridge.backends.acp.websocket import WebSocketConnector
from oma_bridge.errors import BackendError, OMAError, RunTimeoutError
from oma_bridge.messages import last_user_text
from oma_bridge.rpc import PendingCall

__all__ = ["AcpBackend"]

logger = logging.getLogger(__name__)


@dataclass
class _Memory:
    """What outlives one agent process: the protocol session a respawn continues."""

    #: The session to continue after a respawn (resume or load), when the agent can.
    previous: str | None
    #: No prompt was sent in this session yet: the system prompt goes with the next.
    fresh: bool = True
    #: The session's context size after the last turn (``usage_update``'s ``used``).
    used: int = 0
    #: What the agent said it can do at its last ``initialize`` (capabilities.py).
    advertised: dict[str, Any] | None = None

    def initialized(self, init: InitializeResponse) -> None:
        self.advertised = advertised_of(init)

    #: The last turn lost its agent's connection mid-way (the agent may run it still).
    cut_off: bool = False

    def opened(self, opened: Opened) -> None:
        if not opened.continued:
            self.previous, self.fresh, self.used = opened.session_id, True, 0
            self.cut_off = False

    def input_tokens(self, used: int | None) -> int:
        """A turn's input tokens: the growth of the session's context since the last turn."""
        if used is None:
            return 0
        grown = max(0, used - self.used)
        self.used = used
        return grown


class AcpBackend:
    """The live ACP backend of one agent (see the module docstring).

    ``connect`` opens the transport to a new agent; by default the agent is
    spawned as the config says and spoken to over its stdio.
    """

    kind: BackendKind = "acp"

    def __init__(
        self, config: AcpConfig, *, agent_name: str | None = None, connect: Connect | None = None
    ) -> None:
        self.config = config
        self.label = agent_name or "agent"
        self._cwd = config.resolved_cwd()
        # Every process of a sandboxed agent runs in its sandbox: the agent, its terminals.
        self._sandbox = config.sandbox_policy(str(self._cwd))
        self._connect: Connect = connect or (
            _connector(config, self.label) if config.url is not None else self._spawn
        )
        terminals = Terminals(self._cwd, labels=config.labels, sandbox=self._sandbox)
        self._requests = AgentRequests(config, self._cwd, terminals, label=self.label)
        self._lock = anyio.Lock()
        self._session: AcpSession | None = None
        self._memory = _Memory(config.resume_session)
        self._turn_numbers = itertools.count(1)
        #: The latest run's client services, for what the agent asks between runs
        #: (it may finish a URL elicitation while a setting is being sent).
        self._services = ClientServices()
        self._closed = False

    # -- public ------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The pid of the running agent (its process group id), if any."""
        session = self._session
        return session.pid if session is not None else None

    @property
    def session_id(self) -> str | None:
        session = self._session
        return session.session_id if session is not None and session.live else None

    async def run(self, ctx: RunContext) -> BackendOutcome:
        text = last_user_text(ctx.messages, "\n").strip()
        if not text:
            raise BackendError(f'ACP backend "{self.label}" received an empty prompt.')
        # docs/decisions.md, D5: a run cancelled before it starts never spawns anything.
        await anyio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        async with self._lock:
            self._check_open()
            self._services = ClientServices.of(ctx)
            turn = TurnState(
                ctx.run_id,
                Turn(next(self._turn_numbers), ctx.emit, coalesce=self.config.coalesce_text),
                ctx.permission_handler,
                self._services,
            )
            try:
                with anyio.move_on_after(self.config.timeout_s):
                    return await self._run_turn(ctx, turn, text)
                # The profile's timeout_s fired; the turn was cancelled as a caller cancel is.
                assert self.config.timeout_s is not None
                raise RunTimeoutError.for_agent(self.label, round(self.config.timeout_s * 1000))
            finally:
                turn.close()

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
        self._check_open()
        session = self._session
        turn = session.turn if session is not None and session.live else None
        if session is not None and turn is not None and not turn.finished:
            call = await session.start_request(method, params)
            if await _answered_during(call, turn):
                return await call.wait()
            async with self._lock, session.serving(services=self._services):
                return await call.wait()  # the turn ended first: read on
        async with self._lock:
            self._check_open()
            session = await self._ready(None)
            async with session.serving(side=emit, services=self._services):
                return await session.request(method, params)

    def advertised(self) -> dict[str, Any] | None:
        """What the agent said it can do at its last ``initialize`` (PROTOCOL §22.2).

        ``None`` until it was first started; a copy, kept after the agent ends.
        """
        advertised = self._memory.advertised
        return None if advertised is None else dict(advertised)

    async def probe(self) -> dict[str, Any]:
        """Start the agent once, for its ``initialize`` alone, and end it: :meth:`advertised`.

        Between runs only (it waits for a run in flight); an agent already
        running is not started again.  A failure to start raises the
        ``BackendError`` a run would get.
        """
        self._check_open()
        async with self._lock:
            self._check_open()
            session = self._session
            if session is None or not session.live or self._memory.advertised is None:
                probing = await self._new_session()
                try:
                    await probing.probe(self._handshake())
                finally:
                    if self._session is probing:
                        self._session = None
            advertised = self.advertised()
            assert advertised is not None  # set by the handshake
            return advertised

    async def end_session(self) -> None:
        """``session/close`` of the open session, when the agent advertises it.

        The agent frees the session (a remote oma-bridge its detached session
        and its files); within ``stop_grace_s``, and nothing when no session is
        open, the agent is gone, or a run still holds it.  A failure is
        logged: the agent is ended anyway.
        """
        session = self._session
        init = session.init if session is not None else None
        if session is None or init is None or not session.live or session.gone:
            return
        if not init.agent_capabilities.session_capability("close"):
            return
        with anyio.move_on_after(self.config.stop_grace_s):
            async with self._lock:
                if not session.live:
                    return
                try:
                    async with session.serving(services=self._services):
                        await session.request("session/close", {})
                except (OMAError, OSError, anyio.BrokenResourceError) as exc:
                    logger.info("ACP agent %s: session/close failed (%s)", self.label, exc)

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
        session = self._session
        if session is not None:
            await session.end()
        await self._requests.release(None)

    def _check_open(self) -> None:
        if self._closed:
            raise BackendError(f'ACP agent "{self.label}" is closed')

    # -- one run -------------------------------------------------------------------

    async def _run_turn(self, ctx: RunContext, turn: TurnState, text: str) -> BackendOutcome:
        session = await self._ready(turn)
        if self._memory.fresh and ctx.system_prompt and ctx.system_prompt.strip():
            text = f"{ctx.system_prompt.strip()}\n\n{text}"
        # The system prompt is consumed by the first prompt sent, even if it fails.
        self._memory.fresh = False
        params: dict[str, Any] = {
            "sessionId": session.session_id,
            "prompt": [{"type": "text", "text": text}],
        }
        if ctx.meta:
            params["_meta"] = dict(ctx.meta)  # the caller's, as given (trace context, say)
        try:
            answer = await session.prompt(turn, params)
        finally:
            # The connection died under the turn, or the turn outlived its cancel grace.
            self._memory.cut_off = not session.live
        updates = turn.updates
        if updates.emit_error is not None:
            raise updates.emit_error  # the consumer failed; the agent and its session are fine
        input_tokens = self._memory.input_tokens(updates.last_used)
        return outcome_of(answer, updates, input_tokens=input_tokens, label=self.label)

    async def _ready(self, turn: TurnState | None) -> AcpSession:
        """The open session, the agent started (or started again) first when it is not running."""
        session = self._session
        if session is not None and session.gone:
            # It died while idle: nothing of a run is lost, so start it again.
            logger.warning(
                "ACP agent %s %s while idle; respawning", self.label, session.describe_end()
            )
            await session.end()
        if session is None or not session.live:
            session = await self._start(turn)
        return session

    async def _spawn(self) -> AgentProcess:
        """The default transport: the agent spawned as the config says, over its stdio.

        A ``command_sha256`` is checked first, at every spawn (a file that
        differs is never started: ``command_check.py``).
        """
        config = self.config
        assert config.command is not None  # AcpConfig holds a command or a url
        if config.command_sha256 is not None:
            await check_command_sha256(config.command, config.command_sha256, label=self.label)
        return await AgentProcess.spawn(
            config.command,
            config.args,
            env=config.env,
            cwd=str(self._cwd),
            labels=config.labels,
            sandbox=self._sandbox,
            max_line_bytes=config.max_line_bytes,
        )

    async def _start(self, turn: TurnState | None) -> AcpSession:
        session = await self._new_session()
        memory = self._memory
        memory.opened(await session.open(self._handshake(), turn, self._services))
        if memory.cut_off:
            await session.cancel_cut_off_turn()
            memory.cut_off = False
        return session

    async def _new_session(self) -> AcpSession:
        """A session over a new transport (``SPAWNED``), made the current one."""
        try:
            transport = await self._connect()
        except OSError as exc:
            raise BackendError(f'ACP agent "{self.label}" could not be started: {exc}') from exc
        config = self.config
        session = AcpSession(
            transport,
            self._requests,
            label=self.label,
            cancel_grace_s=config.cancel_grace_s,
            stop_grace_s=config.stop_grace_s,
        )
        self._session = session
        if self._closed:  # closed while the spawn was under way
            await session.end()
            self._check_open()
        return session

    def _handshake(self) -> Handshake:
        return Handshake(
            self.config,
            self._cwd,
            self.label,
            self._memory.previous,
            self._requests.who(),
            on_initialized=self._memory.initialized,
        )


def _connector(config: AcpConfig, label: str) -> WebSocketConnector:
    """The connections of an agent reached at its ``url`` (a remote agent)."""
    assert config.url is not None
    return WebSocketConnector(
        url=config.url,
        label=label,
        token_file=config.token_file,
        ca_file=config.ca_file,
        send_timeout_s=config.send_timeout_s,
        max_message_bytes=config.max_line_bytes,
        # A session brought back after a restart: the remote may be restarting too.
        retry=config.resume_session is not None,
    )


async def _answered_during(call: PendingCall, turn: TurnState) -> bool:
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


ACP_BACKENDS.fill(lambda config, agent_name: AcpBackend(config, agent_name=agent_name))
