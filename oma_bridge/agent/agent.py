"""``Agent``: run / stream / prompt / history over one backend."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio

from oma_bridge.agent.config import AfterRunHook, AgentConfig, BeforeRunHook, smallest_ceiling
from oma_bridge.agent.fork import fork_config
from oma_bridge.agent.hooks import apply_after_run, apply_before_run, ensure_outcome
from oma_bridge.agent.input import (
    PreparedInput,
    PreparedPrompt,
    prepare,
    prepare_prompt,
    text_only_kind,
)
from oma_bridge.agent.stream import STREAM_BUFFER, HookFailed, LiveStreams, RunStream
from oma_bridge.agent.traced import start as start_trace
from oma_bridge.backends import (
    Advertising,
    Backend,
    BackendKind,
    BackendOutcome,
    ClientForwarder,
    ElicitationCompleteHandler,
    ElicitationHandler,
    Emit,
    PermissionHandler,
    RunContext,
    SessionEnding,
    SessionRequests,
    text_only,
)
from oma_bridge.backends.acp.services import ClientServices
from oma_bridge.backends.llm.config import LlmConfig
from oma_bridge.errors import (
    BackendError,
    OMAError,
    RunCancelledError,
    RunTimeoutError,
    TokenBudgetExceededError,
    kind_of,
)
from oma_bridge.messages import (
    AgentPromptInput,
    AgentRunInput,
    LLMMessage,
    copy_messages,
)
from oma_bridge.results import (
    AgentRunResult,
    ErrorInfo,
    ErrorKind,
    RunStatus,
    StreamEvent,
    TokenUsage,
)

__all__ = [
    "AfterRunHook",
    "Agent",
    "AgentConfig",
    "AgentState",
    "BeforeRunHook",
    "PreparedInput",
    "PreparedPrompt",
    "RunStream",
]

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------
# The agent


@dataclass
class AgentState:
    """A snapshot of an agent: ``idle``, ``running``, ``completed`` or ``error``."""

    status: Literal["idle", "running", "completed", "error"] = "idle"
    messages: list[LLMMessage] = field(default_factory=list)
    token_usage: TokenUsage = field(default_factory=TokenUsage)
    error: str | None = None


@dataclass
class _Run:
    """The control block of one live run: its cancel scope and why it ended."""

    run_id: str
    scope: anyio.CancelScope
    cancel_requested: bool = False
    partial: list[str] = field(default_factory=list)
    #: Set when the run has fully ended, its backend's clean-up included.
    ended: anyio.Event = field(default_factory=anyio.Event)

    def cancel(self) -> None:
        self.cancel_requested = True
        self.scope.cancel()


async def _discard(_event: StreamEvent) -> None:
    return None


class Agent:
    """One agent: an LLM loop, a process, or an ACP session behind one API.

    The backend is created lazily on the first run and cached (an ACP agent
    keeps its protocol session across runs, and across :meth:`reset`).
    Input is guarded and copied when a method is called, before any hook,
    state change or backend work.
    """

    def __init__(
        self,
        config: AgentConfig,
        *,
        permission_handler: PermissionHandler | None = None,
        elicitation_handler: ElicitationHandler | None = None,
        client_forwarder: ClientForwarder | None = None,
        elicitation_complete_handler: ElicitationCompleteHandler | None = None,
    ) -> None:
        if isinstance(config.backend, LlmConfig):
            config.backend.check(config.name)
        self.config = config
        self.permission_handler = permission_handler
        #: Answers an ACP agent's ``elicitation/create`` (every run); none: ``cancel``.
        self.elicitation_handler = elicitation_handler
        #: Told of an ACP agent's ``elicitation/complete`` (a URL-mode elicitation done).
        self.elicitation_complete_handler = elicitation_complete_handler
        #: Serves an ACP agent's ``fs = "client"`` / ``terminal = "client"`` requests.
        self.client_forwarder = client_forwarder
        self._history: list[LLMMessage] = config.history_messages()
        self._state = AgentState()
        self._backend: Backend | None = None
        self._runs: dict[str, _Run] = {}
        #: The producers of live streams, entered or bare: close() stops them all.
        self._streams = LiveStreams()
        self._prompt_lock = anyio.Lock()
        self._closed = False
        #: Attributes every run's ``invoke_agent`` span carries (the daemon's agentId, profile).
        self.trace_attributes: dict[str, Any] = {}

    # -- identity ----------------------------------------------------------

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def kind(self) -> BackendKind:
        return self.config.backend.kind

    @property
    def text_only(self) -> bool:
        """Process and ACP agents carry text only: structured input is refused."""
        return text_only(self.kind)

    @property
    def backend(self) -> Backend | None:
        """The live backend, once a run created it (``None`` before, and after :meth:`close`)."""
        return self._backend

    @property
    def status(self) -> str:
        """``state.status`` without the copy of the history :attr:`state` makes."""
        return self._state.status

    @property
    def state(self) -> AgentState:
        return AgentState(
            status=self._state.status,
            messages=copy_messages(self._state.messages),
            token_usage=TokenUsage(**self._state.token_usage.to_wire()),
            error=self._state.error,
        )

    @property
    def active_run_ids(self) -> list[str]:
        return list(self._runs)

    # -- input preparation: the one place where input enters ---------------

    def prepare(self, run_input: object) -> PreparedInput:
        """Take ``run`` / ``stream`` input in now: guard, text-only boundary, copy.

        Raises :class:`InvalidMessageError` for bad input.  The value goes to
        :meth:`run` or :meth:`stream` in place of the input, which then do
        none of that work again (the daemon refuses bad input this way
        before it queues a run).
        """
        return prepare(run_input, self.config)

    def prepare_prompt(self, prompt_input: object) -> PreparedPrompt:
        """The same for :meth:`prompt` input: the user turn."""
        return prepare_prompt(prompt_input, self.config)

    def _take(self, run_input: AgentRunInput | PreparedInput) -> list[LLMMessage]:
        prepared = run_input if isinstance(run_input, PreparedInput) else self.prepare(run_input)
        return prepared.take(text_only_kind(self.config))

    # -- public API ----------------------------------------------------------

    async def run(
        self,
        run_input: AgentRunInput | PreparedInput,
        *,
        run_id: str | None = None,
        permission_handler: PermissionHandler | None = None,
        on_event: Emit | None = None,
        max_token_budget: int | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentRunResult:
        """A fresh conversation: reads and writes no history.

        Invalid input raises :class:`InvalidMessageError` before any hook or
        state change; every other failure comes back as a failed result.
        ``permission_handler`` answers this run's permission requests in place
        of the agent's own; ``on_event`` sees its stream events as they come
        (without the closing ``done``); ``max_token_budget`` narrows the
        agent's own ceiling (the smallest applies); ``meta`` is the request's
        ``_meta``, which an ACP agent gets on its ``session/prompt`` (the
        other kinds ignore it).
        """
        return await self._execute(
            self._take(run_input),
            run_id=run_id,
            emit=on_event or _discard,
            max_token_budget=max_token_budget,
            permission_handler=permission_handler,
            meta=meta,
        )

    def stream(
        self,
        run_input: AgentRunInput | PreparedInput,
        *,
        run_id: str | None = None,
        permission_handler: PermissionHandler | None = None,
        buffer: int = STREAM_BUFFER,
        meta: Mapping[str, Any] | None = None,
    ) -> RunStream:
        """Validate now, then return an async iterator of :class:`StreamEvent`.

        A plain method (not an async generator) so that bad input raises here,
        before any event (docs/decisions.md, D11).  The stream ends with ``done`` carrying the
        result, or with ``error`` alone when a hook failed.  Leaving it early
        (``break``, ``aclose()``, the end of ``async with``) cancels the run
        and ends its processes; ``async with agent.stream(x) as stream`` runs
        it in a task group of the block's own (docs/decisions.md, D13).
        ``buffer``: events the run may go ahead of its consumer (0: one at a
        time, at the consumer's pace).  ``meta`` as for :meth:`run`.
        """
        messages, run_id = self._take(run_input), run_id or _new_run_id()

        async def execute(emit: Emit) -> AgentRunResult:
            return await self._execute(
                messages,
                run_id=run_id,
                emit=emit,
                permission_handler=permission_handler,
                raise_callback_errors=True,
                meta=meta,
            )

        return RunStream(execute, run_id, cancel=self.cancel, streams=self._streams, buffer=buffer)

    async def prompt(
        self,
        prompt_input: AgentPromptInput | PreparedPrompt,
        *,
        run_id: str | None = None,
        permission_handler: PermissionHandler | None = None,
        on_event: Emit | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentRunResult:
        """A turn of the agent's conversation: history in, history out.

        The user turn is stored as given (never as a hook rewrote it), before
        the run, so a failed run keeps it; the run's messages follow it.
        Invalid input raises and is not stored.  ``permission_handler``,
        ``on_event`` and ``meta`` as for :meth:`run`.
        """
        prepared = (
            prompt_input
            if isinstance(prompt_input, PreparedPrompt)
            else self.prepare_prompt(prompt_input)
        )
        # A fresh copy already, kept as it is: the caller handed it over.
        turn = prepared.take(text_only_kind(self.config))
        async with self._prompt_lock:
            self._history.append(turn)
            result = await self._execute(
                copy_messages(self._history),
                run_id=run_id,
                emit=on_event or _discard,
                permission_handler=permission_handler,
                meta=meta,
            )
            self._history.extend(copy_messages(result.messages))
            return result

    def get_history(self) -> list[LLMMessage]:
        """A deep copy of the conversation so far."""
        return copy_messages(self._history)

    def reset(self) -> None:
        """Clear history and state; keep the backend (and an ACP session)."""
        self._history = []
        self._state = AgentState()

    def cancel(self, run_id: str | None = None) -> bool:
        """Cancel one live run (or all, with no id); ``True`` if one was live.

        The cancelled run still returns a result, with ``status.code ==
        "cancelled"``.
        """
        targets = list(self._runs.values()) if run_id is None else [self._runs.get(run_id)]
        live = [run for run in targets if run is not None]
        for run in live:
            run.cancel()
        return bool(live)

    async def close(self, *, end_session: bool = True) -> None:
        """Cancel live runs and dispose of the backend (its processes end).

        With ``end_session`` (the default) a protocol session that would
        outlive the agent (an ACP agent's that advertises ``session/close``: a
        remote agent's) is closed first, so that the agent's side frees it;
        ``False`` keeps it there to be continued later (``resume_session``),
        as the daemon does when it stops.
        """
        self._closed = True
        live = list(self._runs.values())
        self.cancel()
        # Shielded: the backends' own stop (SIGTERM, grace, SIGKILL) must finish.
        await self._streams.stop_all()
        # Runs awaited by other tasks end too before the backend goes, so that
        # their processes are gone when close() returns (docs/contract.md §11.36).
        with anyio.CancelScope(shield=True):
            for run in live:
                await run.ended.wait()
        backend, self._backend = self._backend, None
        if backend is not None:
            with anyio.CancelScope(shield=True):
                if end_session and isinstance(backend, SessionEnding):
                    await backend.end_session()
                await backend.aclose()

    async def fork(self) -> Agent:
        """A new agent that starts where this one is, same handlers (PROTOCOL §22.4; fork.py)."""
        if self._closed:
            raise BackendError(f'Agent "{self.name}" is closed')
        handlers = ("permission", "elicitation", "elicitation_complete")
        kept = {f"{name}_handler": getattr(self, f"{name}_handler") for name in handlers}
        return Agent(await fork_config(self), client_forwarder=self.client_forwarder, **kept)

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def session_request(
        self, method: str, params: dict[str, Any], *, emit: Emit | None = None
    ) -> Any:
        """Send a request of the agent's protocol session: an ACP agent's
        ``session/set_mode`` or ``session/set_config_option`` (docs/acp.md).

        The backend is created (and its agent started) if no run did it yet;
        the agent's answer, or its error (a ``WireError``), comes back as it
        is; the updates it sends meanwhile, between runs, go to ``emit``.
        A ``BackendError`` for a closed agent or a kind without a session.
        """
        if self._closed:
            raise BackendError(f'Agent "{self.name}" is closed')
        backend = self._get_backend()
        if not isinstance(backend, SessionRequests):
            raise BackendError(f'Agent "{self.name}" ({self.kind}) has no session to send {method}')
        return await backend.session_request(method, params, emit=emit)

    def advertised(self) -> dict[str, Any] | None:
        """What the agent said it can do at its last start (an ACP agent's ``initialize``).

        ``None`` for a kind that says nothing, and before the agent first
        started; nothing is started to find out (that is :meth:`probe`).
        """
        backend = self._backend
        return backend.advertised() if isinstance(backend, Advertising) else None

    async def probe(self) -> dict[str, Any]:
        """Start the agent once to hear what it can do (PROTOCOL §22.2), and end it.

        An agent already running answers from its last start.  A
        ``BackendError`` for a closed agent, a kind that says nothing, or an
        agent that cannot be started.
        """
        if self._closed:
            raise BackendError(f'Agent "{self.name}" is closed')
        backend = self._get_backend()
        if not isinstance(backend, Advertising):
            raise BackendError(f'Agent "{self.name}" ({self.kind}) says nothing of what it can do')
        return await backend.probe()

    # -- the run -------------------------------------------------------------

    def _get_backend(self) -> Backend:
        if self._backend is None:
            self._backend = self.config.backend.create(agent_name=self.config.name)
        return self._backend

    async def _execute(
        self,
        messages: list[LLMMessage],
        *,
        run_id: str | None,
        emit: Emit = _discard,
        max_token_budget: int | None = None,
        permission_handler: PermissionHandler | None = None,
        raise_callback_errors: bool = False,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentRunResult:
        """Run already prepared input: hooks, backend, outcome rules.

        Never raises for a run failure.  ``max_token_budget`` narrows the
        agent's own ceiling (the smallest applies).

        ``permission_handler`` overrides the agent's own for this run (the
        daemon asks the connection that started it).
        ``raise_callback_errors`` makes a hook failure raise :class:`HookFailed`
        (carrying the failed result) so a stream can end with ``error`` alone.
        """
        if self._closed:
            raise RuntimeError(f'Agent "{self.name}" is closed')
        run = _Run(run_id or _new_run_id(), anyio.CancelScope())
        if run.run_id in self._runs:
            raise ValueError(f'run id "{run.run_id}" is already live on agent "{self.name}"')
        self._runs[run.run_id] = run
        self._state.status = "running"
        budget = smallest_ceiling(self.config.max_token_budget, max_token_budget)

        async def record(event: StreamEvent) -> None:
            if event.type == "text":
                run.partial.append(event.data)
            await emit(event)

        traced, meta = start_trace(self, run.run_id, meta, messages)  # None: tracing off
        sink = record if traced is None else traced.emit(record)
        handler = permission_handler or self.permission_handler
        result: AgentRunResult | None = None
        try:
            result = await self._run_guarded(run, messages, sink, budget, handler, meta)
        except BaseException:
            # Ended from outside with no result (a stream left early, the
            # caller's own scope): the agent is not running it any more.
            self._state.status = "error"
            self._state.error = RunCancelledError().message
            raise
        finally:
            del self._runs[run.run_id]
            run.ended.set()
            if traced is not None:
                traced.end(result)  # None: ended from outside
        self._state.status = "completed" if result.success else "error"
        self._state.messages = copy_messages(result.messages)
        self._state.token_usage = TokenUsage(**result.token_usage.to_wire())
        self._state.error = None if result.success else result.output
        if raise_callback_errors and result.error_info and result.error_info.kind == "callback":
            raise HookFailed(result)
        return result

    async def _run_guarded(
        self,
        run: _Run,
        messages: list[LLMMessage],
        emit: Emit,
        budget: int | None,
        permission_handler: PermissionHandler | None,
        meta: Mapping[str, Any] | None,
    ) -> AgentRunResult:
        timeout_s = self.config.timeout_ms / 1000 if self.config.timeout_ms else None
        outcome: BackendOutcome | None = None
        failure: tuple[BaseException, ErrorKind] | None = None
        with run.scope:
            if timeout_s is not None:
                run.scope.deadline = anyio.current_time() + timeout_s
            try:
                messages = await self._before_run(messages, run.run_id)
            except Exception as error:  # a hook failure: no backend call
                failure = (error, "callback")
            if failure is None and not run.scope.cancel_called:
                context = RunContext(
                    run_id=run.run_id,
                    agent_name=self.name,
                    messages=messages,
                    system_prompt=self.config.system_prompt,
                    emit=emit,
                    max_token_budget=budget,
                    max_turns=self.config.max_turns,
                    permission_handler=permission_handler,
                    meta=meta,
                    backend_options=ClientServices(
                        self.elicitation_handler,
                        self.elicitation_complete_handler,
                        self.client_forwarder,
                    ),
                )
                try:
                    outcome = await self._get_backend().run(context)
                except Exception as error:
                    failure = (error, kind_of(error))
        if run.scope.cancel_called and outcome is None and failure is None:
            return self._stopped_result(run)
        if failure is not None:
            return _failed_result(run.run_id, *failure)
        assert outcome is not None
        result = self._outcome_result(run.run_id, outcome, budget)
        if self.config.after_run is not None:
            try:
                result = await apply_after_run(self.config.after_run, result)
            except Exception as error:
                return _failed_result(run.run_id, error, "callback")
        return ensure_outcome(result)

    async def _before_run(self, messages: list[LLMMessage], run_id: str) -> list[LLMMessage]:
        if self.config.before_run is None:
            return messages
        return await apply_before_run(
            self.config.before_run,
            messages,
            agent=self.config.model_copy(update={"before_run": None, "after_run": None}),
            external_kind=text_only_kind(self.config),
            run_id=run_id,
        )

    def _stopped_result(self, run: _Run) -> AgentRunResult:
        """A run ended by its cancel scope: a caller's cancel or the whole-run timer."""
        partial = "".join(run.partial)
        if run.cancel_requested:
            return AgentRunResult.failed(
                run.run_id, RunCancelledError(), "cancelled", partial=partial
            )
        assert self.config.timeout_ms is not None
        error = RunTimeoutError.for_agent(self.name, self.config.timeout_ms)
        return AgentRunResult.failed(run.run_id, error, "timeout", partial=partial)

    def _outcome_result(
        self, run_id: str, outcome: BackendOutcome, budget: int | None
    ) -> AgentRunResult:
        result = AgentRunResult(
            run_id=run_id,
            success=True,
            output=outcome.output,
            messages=outcome.messages,
            token_usage=outcome.token_usage,
            tool_calls=outcome.tool_calls,
            budget_exceeded=outcome.budget_exceeded,
        )
        if outcome.budget_exceeded:
            error: OMAError = TokenBudgetExceededError(
                self.name, outcome.token_usage.total, budget or 0
            )
            result.status = RunStatus("budget_exhausted", error.message)
            result.error_info = ErrorInfo.from_error("budget", error)
        elif outcome.cancelled:
            error = RunCancelledError()
            result.status = RunStatus("cancelled", error.message)
            result.error_info = ErrorInfo.from_error("cancelled", error)
        elif outcome.error is not None:
            result.status = RunStatus("error", outcome.error.message)
            result.error_info = ErrorInfo.from_error(kind_of(outcome.error), outcome.error)
        result.success = result.status.code == "ok"
        return result


def _new_run_id() -> str:
    return uuid.uuid4().hex


def _failed_result(run_id: str, error: BaseException, kind: ErrorKind) -> AgentRunResult:
    if kind == "internal":
        logger.error("internal error in a run", exc_info=error)
    return AgentRunResult.failed(run_id, error, kind)
