"""``RunStream``: the async iterator of :meth:`Agent.stream`, and how a stream ends."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from oma_bridge.backends import PermissionHandler
from oma_bridge.messages import LLMMessage
from oma_bridge.results import AgentRunResult, StreamEvent

if TYPE_CHECKING:
    from oma_bridge.agent.agent import Agent

__all__ = ["HookFailed", "RunStream", "StreamOutcome", "closing_events"]


class HookFailed(Exception):
    """Carries the failed result of a hook out of a stream's producer."""

    def __init__(self, result: AgentRunResult) -> None:
        super().__init__(result.output)
        self.result = result


# ---------------------------------------------------------------------------
# Streaming


@dataclass
class StreamOutcome:
    """What a stream's producer shares with its consumer: its result, its scope."""

    result: AgentRunResult | None = None
    #: The producer's cancel scope, set once it runs.
    scope: anyio.CancelScope | None = None

    def stop(self, task: asyncio.Task[None]) -> None:
        """End the producer through its cancel scope, so shielded clean-up runs whole.

        A native ``task.cancel()`` would break through the backends' shielded
        stops (a process would lose its SIGTERM grace); it is used only for a
        producer that has not started, which has nothing to clean up.
        """
        if self.scope is not None:
            self.scope.cancel()
        elif not task.done():
            task.cancel()


#: Events a stream's producer may run ahead of its consumer.  A small bound
#: keeps backpressure (a slow consumer slows the run, memory stays flat)
#: while sparing a task switch per event: a producer that has several events
#: ready hands them over in one go (measured in docs/benchmarks.md).
_STREAM_BUFFER = 64


class RunStream:
    """The async iterator returned by :meth:`Agent.stream`.

    The run executes in a task owned by the agent, so that backends may hold
    task groups open while events flow (a task group must not stay open
    across a ``yield``).  A small bounded buffer gives backpressure: a slow
    consumer slows the producer instead of growing memory.  The task holds no
    reference to this object, so a consumer that drops the stream early lets
    it be collected, and ``__del__`` cancels the run.  ``result`` holds the
    final :class:`AgentRunResult` once the stream has ended.
    """

    def __init__(
        self,
        agent: Agent,
        messages: list[LLMMessage],
        run_id: str,
        *,
        permission_handler: PermissionHandler | None = None,
        buffer: int = _STREAM_BUFFER,
    ) -> None:
        """``buffer``: events the producer may run ahead (0: one handed over at a time)."""
        self.run_id = run_id
        self._agent = agent
        self._permission_handler = permission_handler
        self._messages: list[LLMMessage] | None = messages
        self._outcome = StreamOutcome()
        self._send, self._receive = anyio.create_memory_object_stream[StreamEvent](buffer)
        self._task: asyncio.Task[None] | None = None

    @property
    def result(self) -> AgentRunResult | None:
        return self._outcome.result

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> StreamEvent:
        if self._task is None:
            self._start()
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            await self._finish()
            raise StopAsyncIteration from None

    def _start(self) -> None:
        if self._messages is None:
            raise RuntimeError("a stream can be iterated once")
        messages, self._messages = self._messages, None
        producer = _produce(
            self._agent, messages, self.run_id, self._send, self._outcome, self._permission_handler
        )
        self._task = asyncio.get_running_loop().create_task(producer)
        streams = self._agent._streams
        streams[self._task] = self._outcome
        self._task.add_done_callback(lambda task: streams.pop(task, None))

    async def _finish(self) -> None:
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait([task])
        if task is not None and not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]  # a bug in the run: surface it

    def cancel(self) -> bool:
        """Cancel the run; the stream then ends with a ``cancelled`` result."""
        return self._agent.cancel(self.run_id)

    async def aclose(self) -> None:
        """Stop the run (its processes end) and release the stream."""
        self._messages = None
        task = self._task
        if task is not None and not task.done():
            self._outcome.stop(task)
            with anyio.CancelScope(shield=True):
                await asyncio.wait([task])
        self._receive.close()

    async def __aenter__(self) -> RunStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        # A consumer that breaks out of ``async for`` without closing: the run
        # must not outlive its stream, so its task is cancelled here.
        task = self._task
        if task is not None and not task.done():
            self._outcome.stop(task)


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
    agent: Agent,
    messages: list[LLMMessage],
    run_id: str,
    send: MemoryObjectSendStream[StreamEvent],
    outcome: StreamOutcome,
    permission_handler: PermissionHandler | None,
) -> None:
    """Run one streamed run: events, then ``done`` (or ``error`` alone for a hook).

    Its cancel scope is how :class:`RunStream` and :meth:`Agent.close` end it
    (see :meth:`StreamOutcome.stop`).
    """
    with anyio.CancelScope() as outcome.scope:
        async with send:
            try:
                result = await agent.execute(
                    messages,
                    run_id=run_id,
                    emit=send.send,
                    permission_handler=permission_handler,
                    raise_callback_errors=True,
                )
            except HookFailed as failed:
                result = failed.result
            outcome.result = result
            for event in closing_events(result):
                await send.send(event)
