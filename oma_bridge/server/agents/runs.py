"""The runs in flight: the one place that counts queued and running runs.

Runs on one agent are served one at a time in arrival order (the agent's
FIFO lock: an ACP session cannot take two prompts at once); runs on
different agents run in parallel up to ``max_concurrent_runs``; past
``max_queued_runs`` waiting runs a new one is refused with -32001.  A run
cancelled while it waits never reaches its backend, so nothing is spawned.
A run that asked ``onDisconnect: "continue"`` is served in the task group of
:meth:`Runs.run`, so that it outlives its request and its connection.
Every run's end, however it ends, is told once to the daemon's recorder
(:mod:`oma_bridge.server.metrics`), with its status and, for a run that
started, its duration.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import anyio
import anyio.abc

from oma_bridge.errors import RunCancelledError, WireError
from oma_bridge.results import AgentRunResult
from oma_bridge.rpc import INVALID_PARAMS
from oma_bridge.server.agents.registry import HostedAgent
from oma_bridge.server.config import ServerSection
from oma_bridge.server.metrics import NO_METRICS, TEAM_KIND, Recorder
from oma_bridge.server.session import Session
from oma_bridge.wire.codes import INTERNAL_ERROR, OVERLOADED

__all__ = ["LiveRun", "RunRecord", "Runs"]

logger = logging.getLogger("oma_bridge.server")

#: Results of finished one-off runs (``oma/runAgent``) kept for ``run/result``:
#: they have no agent, so no journal; an agent's runs are found in its journal.
_KEPT_RESULTS = 256


class RunRecord(Protocol):
    """A run's entries in its agent's journal (:class:`~.turns.TurnJournal`)."""

    async def settle(
        self, result: AgentRunResult | None, error: BaseException | None = None
    ) -> AgentRunResult | None:
        """Journal the run's end if it is not yet: ``result``, else cancelled or failed."""
        ...


@dataclass(eq=False)
class LiveRun:
    run_id: str
    agent_id: str | None
    method: str
    session: Session
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    started_at: float | None = None
    cancel: Callable[[], bool] | None = None
    cancel_requested: bool = False
    #: The profile and its kind, for the metrics; an agent's run takes its agent's.
    profile: str = ""
    kind: str = TEAM_KIND


class Runs:
    """Queue, slots and bookkeeping of every run; see the module docstring."""

    def __init__(self, settings: ServerSection, recorder: Recorder = NO_METRICS) -> None:
        self.settings = settings
        self.recorder = recorder
        self.live: dict[str, LiveRun] = {}
        self.finished: OrderedDict[str, AgentRunResult] = OrderedDict()
        self._slots = anyio.CapacityLimiter(settings.max_concurrent_runs)
        self._queued = 0
        #: Where detached runs are served, while :meth:`run` runs.
        self._task_group: anyio.abc.TaskGroup | None = None

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Host the runs that outlive their request (``detach``) until cancelled."""
        async with anyio.create_task_group() as tg:
            self._task_group = tg
            task_status.started()
            await anyio.sleep_forever()

    def new(
        self,
        run_id: str | None,
        agent_id: str | None,
        method: str,
        session: Session,
        *,
        profile: str = "",
        kind: str = TEAM_KIND,
    ) -> LiveRun:
        """A run about to be queued; -32602 for a live id, -32001 past the queue limit.

        ``profile`` and ``kind`` label a run without an agent (``oma/runAgent``'s);
        the default is a team run's.
        """
        run_id = run_id or secrets.token_hex(16)
        if run_id in self.live:
            raise WireError(
                INVALID_PARAMS,
                "Invalid params",
                {"errors": [{"loc": ["runId"], "msg": f'run id "{run_id}" is already live'}]},
            )
        if self._queued >= self.settings.max_queued_runs:
            raise WireError(OVERLOADED, "Overloaded: too many runs queued", {"retryAfterMs": 1000})
        return LiveRun(run_id, agent_id, method, session, profile=profile, kind=kind)

    @property
    def queued(self) -> int:
        """Runs waiting for their agent or a slot (they are in :attr:`live` too)."""
        return self._queued

    async def serve(
        self,
        run: LiveRun,
        hosted: HostedAgent | None,
        execute: Callable[[], Awaitable[AgentRunResult]],
        *,
        detach: bool = False,
        record: RunRecord | None = None,
    ) -> AgentRunResult:
        """Queue the run, execute it and answer its result (see :meth:`_serve`).

        ``detach``: served in the task group of :meth:`run`, so that the
        caller's cancellation (its connection closed) ends only the wait.
        ``record``: the run's entries in its agent's journal, settled however
        the run ends (see :meth:`_serve`).
        """
        if not detach or self._task_group is None:
            return await self._serve(run, hosted, execute, record)
        finished = anyio.Event()
        outcome: list[AgentRunResult] = []

        async def in_background() -> None:
            try:
                outcome.append(await self._serve(run, hosted, execute, record))
            except Exception:
                # In the daemon's task group, an error would end the daemon and
                # every session with it: logged, and answered -32603 below.
                logger.exception("run %s failed", run.run_id)
            finally:
                finished.set()

        self._task_group.start_soon(in_background)
        await finished.wait()  # a closed connection cancels this wait, not the run
        if not outcome:
            raise WireError(INTERNAL_ERROR, "Internal error")  # the run raised: logged above
        return outcome[0]

    async def _serve(
        self,
        run: LiveRun,
        hosted: HostedAgent | None,
        execute: Callable[[], Awaitable[AgentRunResult]],
        record: RunRecord | None,
    ) -> AgentRunResult:
        """Queue (FIFO per agent, then a global slot), execute, account.

        ``record`` is settled here whatever ends the run (a cancel while it is
        queued, its request cancelled, a bug): every run of an agent has its
        ``run_end`` (PROTOCOL §13.3).  The result of a run whose agent was
        closed is kept with the one-off runs' (its journal went with the
        agent), for ``run/result``.
        """
        self.live[run.run_id] = run
        self._queued += 1
        if hosted is not None:
            hosted.queued += 1
            hosted.changed()
        queued = True
        result: AgentRunResult | None = None
        began: float | None = None
        raised: BaseException | None = None
        try:
            with run.scope:
                lock = hosted.lock if hosted is not None else contextlib.nullcontext()
                async with lock, self._slots:
                    self._queued -= 1
                    queued = False
                    if hosted is not None:
                        hosted.queued -= 1
                        hosted.running += 1
                        hosted.changed()
                    run.started_at = time.time()
                    began = time.perf_counter()
                    try:
                        result = await execute()
                    finally:
                        if hosted is not None:
                            hosted.running -= 1
                            hosted.changed()
            if result is None:
                # The scope caught a cancel while the run was queued: nothing was spawned.
                result = AgentRunResult.failed(run.run_id, RunCancelledError(), "cancelled")
            if record is not None:
                await record.settle(result)
            if hosted is None or hosted.closed:
                # An agent's run is in its journal, which bounds what it keeps.
                self._keep(result)
            return result
        except BaseException as error:
            raised = error
            if record is not None:
                with anyio.CancelScope(shield=True):
                    settled = await record.settle(None, error)
                if settled is not None and hosted is not None and hosted.closed:
                    self._keep(settled)
            raise
        finally:
            if queued:
                self._queued -= 1
                if hosted is not None:
                    hosted.queued -= 1
                    hosted.changed()
            self.live.pop(run.run_id, None)
            if hosted is not None:
                hosted.mark_idle()
            self._record(run, hosted, result, began, raised)

    def _record(
        self,
        run: LiveRun,
        hosted: HostedAgent | None,
        result: AgentRunResult | None,
        began: float | None,
        raised: BaseException | None,
    ) -> None:
        """Tell the recorder how the run ended (once; it raised: ``error``, or ``cancelled``)."""
        duration = time.perf_counter() - began if began is not None else None
        if result is not None:
            status, usage = result.status.code, result.token_usage
        else:
            # Raised out of serve(): the caller's scope was cancelled, or the run failed.
            cancelled = isinstance(raised, anyio.get_cancelled_exc_class())
            status = "cancelled" if run.cancel_requested or cancelled else "error"
            usage = None
        if hosted is not None:
            profile, kind = hosted.profile_name, str(hosted.agent.kind)
        else:
            profile, kind = run.profile, run.kind
        self.recorder.run_ended(profile, kind, status, duration, usage)

    def session_of(self, run_id: str | None) -> Session | None:
        """The connection that started a live run (it is asked first, as for permissions)."""
        run = self.live.get(run_id) if run_id is not None else None
        return run.session if run is not None else None

    def cancel_agent(self, agent_id: str) -> None:
        """Cancel every live run of the agent ``agent_id``, queued or running."""
        for run in list(self.live.values()):
            if run.agent_id == agent_id:
                self.cancel(run)

    def cancel_all(self) -> None:
        """Cancel every live run, queued or running (the daemon stops)."""
        for run in list(self.live.values()):
            self.cancel(run)

    def cancel(self, run: LiveRun) -> bool:
        run.cancel_requested = True
        if run.started_at is None:
            run.scope.cancel()
            return True
        return run.cancel() if run.cancel is not None else False

    def _keep(self, result: AgentRunResult) -> None:
        self.finished[result.run_id] = result
        while len(self.finished) > _KEPT_RESULTS:
            self.finished.popitem(last=False)
