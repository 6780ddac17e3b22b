"""``RunStream``: the async iterator of :meth:`Agent.stream`, and how a stream ends."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import Any, TypeAlias

import anyio
import anyio.abc

from oma_bridge.backends import Emit
from oma_bridge.results import AgentRunResult, StreamEvent
from oma_bridge.waiting import Handover

__all__ = [
    "STREAM_BUFFER",
    "Execute",
    "HookFailed",
    "LiveStreams",
    "RunStream",
    "StreamOutcome",
    "closing_events",
]

logger = logging.getLogger(__name__)


class HookFailed(Exception):
    """Carries the failed result of a hook out of a stream's producer."""

    def __init__(self, result: AgentRunResult) -> None:
        super().__init__(result.output)
        self.result = result


# ---------------------------------------------------------------------------
# Streaming


@dataclass(eq=False)
class StreamOutcome:
    """What a stream's producer shares with its consumer and its agent."""

    result: AgentRunResult | None = None
    #: The producer's cancel scope, set once it runs.
    scope: anyio.CancelScope | None = None
    #: Asked to stop; a producer that has not begun then never runs the agent.
    stopped: bool = False
    #: A bug in the run (never a run failure: those are results), for the consumer.
    error: Exception | None = None
    #: Set when the producer has ended, its clean-up included (made when it starts).
    ended: anyio.Event | None = None
    #: The bare form's runner (docs/decisions.md, D13), held here so it is never lost.
    runner: asyncio.Task[None] | None = None

    def stop(self) -> None:
        """End the producer through its cancel scope, so shielded clean-up runs whole.

        A native ``task.cancel()`` would break through the backends' shielded
        stops (a process would lose its SIGTERM grace), so it is never used: a
        producer that has not begun yet sees ``stopped`` and does nothing.
        """
        self.stopped = True
        if self.scope is not None:
            self.scope.cancel()

    async def wait_ended(self) -> None:
        """Wait, shielded, until the producer is gone (its processes with it)."""
        if self.ended is not None:
            with anyio.CancelScope(shield=True):
                await self.ended.wait()


class LiveStreams:
    """The producers of one agent's live streams, entered or bare: :meth:`stop_all` ends them.

    The agent holds one and hands it to each :class:`RunStream`, whose
    producer is in it from its start to its end.
    """

    __slots__ = ("_outcomes",)

    def __init__(self) -> None:
        self._outcomes: set[StreamOutcome] = set()

    def add(self, outcome: StreamOutcome) -> None:
        self._outcomes.add(outcome)

    def discard(self, outcome: StreamOutcome) -> None:
        self._outcomes.discard(outcome)

    def __len__(self) -> int:
        """How many producers are live."""
        return len(self._outcomes)

    async def stop_all(self) -> None:
        """Stop every producer and wait, shielded, until each has ended (its processes too)."""
        outcomes = list(self._outcomes)
        for outcome in outcomes:
            outcome.stop()
        for outcome in outcomes:
            await outcome.wait_ended()


#: Runs a stream's run with the stream's ``emit``: its result, or :class:`HookFailed`
#: raised when a hook failed (the agent's ``_execute``, bound to the run's input).
Execute: TypeAlias = Callable[[Emit], Awaitable[AgentRunResult]]

#: Events a stream's producer may run ahead of its consumer.  A small bound
#: keeps backpressure (a slow consumer slows the run, memory stays flat)
#: while sparing a task switch per event: a producer that has several events
#: ready hands them over in one go (measured in docs/benchmarks.md).
STREAM_BUFFER = 64


class RunStream:
    """The async iterator returned by :meth:`Agent.stream`.

    The run executes in a producer task of its own, so that backends may
    hold task groups open while events flow (a task group must not stay open
    across a ``yield``).  Entered (``async with agent.stream(x) as stream``),
    the producer runs in a task group the stream opens in its
    ``__aenter__`` and closes in its ``__aexit__``: leaving the block, by its
    end, a ``break`` or an exception, stops the run and waits for its
    clean-up.  Iterated bare (``async for event in agent.stream(x)``), there
    is no block to own a task group, so the agent holds the producer
    (docs/decisions.md, D13); the producer holds no reference to the stream,
    so a consumer that drops it early lets it be collected and ``__del__``
    stops the run.  Either way :meth:`Agent.close` stops it.  A small bounded
    buffer gives backpressure: a slow consumer slows the producer instead of
    growing memory.  ``result`` holds the final :class:`AgentRunResult` once
    the stream has ended.
    """

    def __init__(
        self,
        execute: Execute,
        run_id: str,
        *,
        cancel: Callable[[str], bool],
        streams: LiveStreams,
        buffer: int = STREAM_BUFFER,
    ) -> None:
        """``execute`` runs the run; ``cancel`` cancels a run by id (the agent's
        :meth:`~oma_bridge.agent.Agent.cancel`); ``streams`` holds the producer while it
        runs; ``buffer``: events it may run ahead (0: one handed over at a time)."""
        self.run_id = run_id
        #: Taken when the stream starts: a stream runs once.
        self._execute: Execute | None = execute
        self._cancel = cancel
        self._streams = streams
        self._outcome = StreamOutcome()
        self._events: Handover[StreamEvent] = Handover(buffer)
        self._task_group: anyio.abc.TaskGroup | None = None
        self._error_seen = False

    @property
    def result(self) -> AgentRunResult | None:
        return self._outcome.result

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> StreamEvent:
        if self._execute is not None:
            self._start()
        try:
            return await self._events.get()
        except anyio.EndOfStream:
            await self._outcome.wait_ended()
            error = self._outcome.error
            if error is not None and not self._error_seen:
                self._error_seen = True
                raise error from None  # a bug in the run: surface it
            raise StopAsyncIteration from None

    def _start(self) -> None:
        execute, self._execute = self._execute, None
        if execute is None:
            raise RuntimeError("a stream can be iterated once")
        outcome = self._outcome
        outcome.ended = anyio.Event()
        self._streams.add(outcome)
        producer = partial(_produce, execute, self._events, outcome, self._streams)
        if self._task_group is not None:
            self._task_group.start_soon(producer)
        else:
            outcome.runner = asyncio.get_running_loop().create_task(producer())

    def cancel(self) -> bool:
        """Cancel the run; the stream then ends with a ``cancelled`` result."""
        return self._cancel(self.run_id)

    async def aclose(self) -> None:
        """Stop the run (its processes end, their grace kept) and release the stream."""
        self._execute = None
        self._outcome.stop()
        await self._outcome.wait_ended()
        self._events.close(discard=True)
        error = self._outcome.error
        if error is not None and not self._error_seen:
            self._error_seen = True
            logger.error("a stream's run failed after its consumer left", exc_info=error)

    async def __aenter__(self) -> RunStream:
        if self._execute is None or self._task_group is not None:
            raise RuntimeError("a stream is entered once, before its first event")
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        task_group, self._task_group = self._task_group, None
        try:
            await self.aclose()
        finally:
            # The producer has ended, so this returns at once.  The block's own
            # exception is not handed in: it leaves as itself, not in a group
            # (the producer never raises into the group, see _produce).
            if task_group is not None:
                await task_group.__aexit__(None, None, None)
        return None

    def __del__(self) -> None:
        # A bare consumer that broke out of ``async for`` without closing: the
        # run must not outlive its stream.
        outcome = self._outcome
        if outcome.ended is not None and not outcome.ended.is_set():
            outcome.stop()


def closing_events(result: AgentRunResult) -> list[StreamEvent]:
    """How a stream ends for ``result``: ``done`` (after an ``error`` for a backend,
    provider or internal failure), or ``error`` alone when a hook failed."""
    info = result.error_info
    if info is not None and info.kind == "callback":
        return [_error_event(info.name, result.output, info.code)]
    events = []
    if info is not None and info.kind in ("backend", "provider", "internal"):
        events.append(_error_event(info.name, info.message or result.output, info.code))
    events.append(StreamEvent("done", result))
    return events


def _error_event(name: str | None, message: str, code: str | None) -> StreamEvent:
    data: dict[str, Any] = {"name": name or "Error", "message": message}
    if code:
        data["code"] = code
    return StreamEvent("error", data)


async def _produce(
    execute: Execute,
    events: Handover[StreamEvent],
    outcome: StreamOutcome,
    streams: LiveStreams,
) -> None:
    """Run one streamed run: events, then ``done`` (or ``error`` alone for a hook).

    Its cancel scope is how :class:`RunStream` and :meth:`Agent.close` end it
    (see :meth:`StreamOutcome.stop`).  A bug in the run is kept for the
    consumer rather than raised into the task group, whose host is the
    consumer's own block.
    """
    try:
        if outcome.stopped:
            return
        with anyio.CancelScope() as outcome.scope:
            try:
                result = await execute(events.put)
            except HookFailed as failed:
                result = failed.result
            outcome.result = result
            for event in closing_events(result):
                await events.put(event)
    except Exception as error:
        outcome.error = error
    finally:
        events.close()
        streams.discard(outcome)
        assert outcome.ended is not None
        outcome.ended.set()
