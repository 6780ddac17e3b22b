"""Handles of what a client opened on the daemon: an agent, the stream of a run, a journal.

Each handle is handed the :class:`~oma_bridge.client.routes.Channel` it
talks through and registers, in that channel's routes, only what it waits
for.  :class:`RemoteStream` and :class:`Watch` are async context managers
as :class:`~oma_bridge.RunStream` is, and async iterators used bare as
well; neither is an async generator, so no ``yield`` ever leaves a task
group or a cancel scope open in the consumer's frame.
"""

from __future__ import annotations

import contextlib
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from oma_bridge.client.errors import DaemonNotRunningError, client_error
from oma_bridge.client.routes import Channel, Route
from oma_bridge.errors import WireError
from oma_bridge.results import AgentRunResult, StreamEvent
from oma_bridge.rpc import ConnectionClosedError, PendingCall
from oma_bridge.waiting import Handover

if TYPE_CHECKING:
    from collections.abc import Callable

    from oma_bridge.messages.types import LLMMessage

__all__ = ["JournalEntry", "RemoteAgent", "RemoteStream", "Watch", "new_run_id"]

#: How long leaving a stream early waits for the daemon to end the run.
_STOP_GRACE_S = 5.0


def new_run_id() -> str:
    return uuid.uuid4().hex


class RemoteAgent:
    """An agent opened on the daemon: :class:`~oma_bridge.Agent`'s methods that have a
    wire method, with the same names and results (awaited, since each is a request).

    ``before_run`` and ``after_run`` answer the daemon's hooks for this agent
    on this connection until :meth:`close`.  ``worktree`` is ``{"path",
    "branch", "base"}`` for an agent of a ``cwd = "worktree"`` profile.
    """

    def __init__(
        self,
        client: Channel,
        agent_id: str,
        profile: str,
        before_run: Callable[..., Any] | None,
        after_run: Callable[..., Any] | None,
        worktree: dict[str, Any] | None = None,
    ) -> None:
        self.client = client
        self.agent_id = agent_id
        self.profile = profile
        self.before_run = before_run
        self.after_run = after_run
        self.worktree = worktree
        self._hooks = client.routes.hooks(agent_id, self)

    async def run(
        self, run_input: str | Sequence[Any], *, run_id: str | None = None
    ) -> AgentRunResult:
        """``agent/run``: a fresh conversation (reads and writes no history)."""
        params = {"agentId": self.agent_id, "input": run_input, "runId": run_id or new_run_id()}
        return AgentRunResult.from_wire(await self.client.request("agent/run", params))

    def stream(self, run_input: str | Sequence[Any], *, run_id: str | None = None) -> RemoteStream:
        """``agent/stream``: the events as the daemon relays them (see :class:`RemoteStream`)."""
        return RemoteStream(self.client, self.agent_id, run_input, run_id or new_run_id())

    async def prompt(
        self, prompt_input: str | Sequence[Any], *, run_id: str | None = None
    ) -> AgentRunResult:
        """``agent/prompt``: a turn of the agent's conversation (history in, history out)."""
        params = {"agentId": self.agent_id, "input": prompt_input, "runId": run_id or new_run_id()}
        return AgentRunResult.from_wire(await self.client.request("agent/prompt", params))

    async def get_history(self) -> list[LLMMessage]:
        """``agent/history``: the conversation so far, as the daemon holds it."""
        answer = await self.client.request("agent/history", {"agentId": self.agent_id})
        return list(answer["messages"])

    #: The name :meth:`get_history` had before it took :class:`~oma_bridge.Agent`'s.
    history = get_history

    async def fork(self) -> RemoteAgent:
        """``agent/fork`` (PROTOCOL §22.4): a new agent that starts where this one is (its
        history and journal copied), with this one's hooks, on this connection."""
        answer = await self.client.request("agent/fork", {"agentId": self.agent_id})
        return RemoteAgent(
            self.client, answer["agentId"], self.profile, self.before_run, self.after_run
        )

    async def reset(self) -> None:
        """``agent/reset``: clear the history and state; the backend stays."""
        await self.client.request("agent/reset", {"agentId": self.agent_id})

    async def cancel(self, run_id: str | None = None) -> bool:
        """``run/cancel`` of one run, or with no id of every run of this agent in flight
        (queued ones included); ``True`` if one was.  The run still answers, cancelled."""
        if run_id is not None:
            return bool((await self.client.request("run/cancel", {"runId": run_id}))["cancelled"])
        status = await self.client.request("daemon/status")
        mine = [run["runId"] for run in status["runs"] if run.get("agentId") == self.agent_id]
        cancelled = [await self.cancel(each) for each in mine]
        return any(cancelled)

    async def close(self) -> None:
        """``agent/close``: the daemon disposes of the agent (its processes end).

        An agent that had a worktree: :attr:`worktree` then also says
        whether it was ``kept`` (it changed) and its ``changes``.
        """
        answer = await self.client.request("agent/close", {"agentId": self.agent_id})
        self._hooks.close()
        if isinstance(answer, dict) and isinstance(answer.get("worktree"), dict):
            self.worktree = answer["worktree"]

    async def __aenter__(self) -> RemoteAgent:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def watch(self, *, after_seq: int | None = None, retry_s: float = 0.2) -> Watch:
        """The agent's journal entries after ``after_seq`` (default: from now), then live ones.

        See :class:`Watch`: it holds a connection of its own and reconnects by itself.
        """
        return Watch(self.client, self.agent_id, after_seq=after_seq, retry_s=retry_s)


@dataclass(frozen=True)
class JournalEntry:
    """One ``agent/event``: an entry of an agent's journal (``docs/sessions.md``)."""

    agent_id: str
    seq: int
    #: ``{"type": "run_start" | "event" | "run_end" | "update" | "note", ...}``
    entry: dict[str, Any]

    @property
    def type(self) -> str:
        """The entry's ``type``: ``run_start``, ``event``, ``run_end``, ``update`` or ``note``."""
        return str(self.entry.get("type"))

    @property
    def text(self) -> str | None:
        """The text of a ``text`` stream event, else ``None``."""
        event = self.entry.get("event")
        if (
            self.entry.get("type") == "event"
            and isinstance(event, dict)
            and event.get("type") == "text"
            and isinstance(event.get("data"), str)
        ):
            return str(event["data"])
        return None


class RemoteStream:
    """The events of one ``agent/stream`` call, in wire order; ``result`` once it has ended.

    Entered (``async with agent.stream(x) as stream``), the request is sent
    on entry and leaving the block before the stream's end (a ``break``, an
    exception, a cancel) cancels the run (``run/cancel``) and waits, shielded
    and for at most a few seconds, for the daemon's cancelled answer, as
    leaving a :class:`~oma_bridge.RunStream` stops its run.  Iterated bare
    (``async for event in agent.stream(x)``), the request is sent at the
    first event; a consumer that drops the stream early leaves the run to
    the daemon (``run/cancel`` ends it), as before there was a block.

    No task waits for the answer: the connection's reader hands each
    ``run/event`` to this stream's buffer (unbounded, so the reader never
    waits for a slow consumer; the daemon bounds what it sends) and closes
    it when the answer comes, which the daemon sends after the last event.
    An error answer (bad input, an unknown agent) is raised by the
    iteration once the events before it are taken.
    """

    def __init__(
        self, client: Channel, agent_id: str, run_input: str | Sequence[Any], run_id: str
    ) -> None:
        self.client = client
        self.agent_id = agent_id
        self.run_id = run_id
        self.result: AgentRunResult | None = None
        self._input = run_input
        self._events: Handover[StreamEvent] = Handover(math.inf)
        self._call: PendingCall | None = None
        self._route: Route | None = None
        self._begun = False
        self._entered = False

    async def _begin(self) -> None:
        self._begun = True
        self._route = self.client.routes.run_events(self.run_id, self._events.put)
        params = {"agentId": self.agent_id, "input": self._input, "runId": self.run_id}
        try:
            self._call = await self.client.start_request("agent/stream", params)
        except BaseException:
            self._end()
            raise
        self._call.when_settled(self._events.close)

    def __aiter__(self) -> RemoteStream:
        return self

    async def __anext__(self) -> StreamEvent:
        if not self._begun:
            await self._begin()
        try:
            return await self._events.get()
        except anyio.EndOfStream:
            await self._finish()
            raise StopAsyncIteration from None

    async def _finish(self) -> None:
        """The answer has come: keep the result, or raise the error (once)."""
        call, self._call = self._call, None
        self._end()
        if call is None:
            return  # ended already
        try:
            self.result = AgentRunResult.from_wire(await call.wait())
        except WireError as error:
            raise client_error(error) from None

    def _end(self) -> None:
        if self._route is not None:
            self._route.close()

    async def cancel(self) -> bool:
        """``run/cancel``: the stream then ends with a ``cancelled`` result."""
        return bool((await self.client.request("run/cancel", {"runId": self.run_id}))["cancelled"])

    async def aclose(self) -> None:
        """Stop: a run still going is cancelled and its answer awaited (a few seconds at most)."""
        self._begun = True  # a stream closed before it began never sends its request
        call = self._call
        if call is not None and not call.settled:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_STOP_GRACE_S):
                with contextlib.suppress(Exception):
                    await self.cancel()
                with contextlib.suppress(Exception):
                    await call.wait()
            if not call.settled:
                await call.withdraw()
            else:
                with contextlib.suppress(Exception):  # the run's own end (cancelled)
                    self.result = AgentRunResult.from_wire(await call.wait())
        self._events.close(discard=True)
        self._call = None
        self._end()

    async def __aenter__(self) -> RemoteStream:
        if self._begun or self._entered:
            raise RuntimeError("a stream is entered once, before its first event")
        self._entered = True
        await self._begin()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        # A bare consumer that broke out early: the run stays the daemon's,
        # its late events have nobody to go to.
        self._end()


class Watch:
    """Follow one agent's journal: its entries after ``after_seq`` (default: from now), then
    live ones, as :class:`JournalEntry` items.

    Each (re)connection is a connection of its own to the daemon (made by
    :meth:`Channel.reconnect`); when one drops, the watch reconnects after
    ``retry_s`` and resumes after the last ``seq`` it received, so a dropped
    connection costs no entry.  An ``afterSeq`` the daemon no longer holds
    raises :class:`~oma_bridge.client.DaemonError` (``CursorExpired``, with
    ``oldestSeq`` in its data).

    The following runs in the background of the client's block (``async
    with connect() as client``), never in the consumer's frame: ``async with
    agent.watch() as entries`` stops it when the block ends, so does
    :meth:`aclose` (``contextlib.aclosing``), and a bare ``async for`` that
    drops the watch stops it when the watch is collected; the client's block
    ending ends every watch.
    """

    def __init__(
        self, client: Channel, agent_id: str, *, after_seq: int | None, retry_s: float
    ) -> None:
        self.agent_id = agent_id
        self._client = client
        self._follower = _Follower(client, agent_id, after_seq, retry_s)
        self._begun = False
        self._error_seen = False

    @property
    def seq(self) -> int | None:
        """The last ``seq`` received (``None`` until the daemon first answered)."""
        return self._follower.cursor

    def _begin(self) -> None:
        if not self._begun:
            self._begun = True
            # The follower holds no reference to the watch: a dropped watch is collected.
            self._client.start_soon(self._follower.run)

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> JournalEntry:
        self._begin()
        try:
            return await self._follower.entries.get()
        except anyio.EndOfStream:
            await self._follower.wait_ended()
            error = self._follower.error
            if error is not None and not self._error_seen:
                self._error_seen = True
                raise error from None
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Stop following and wait until the watch's connection is closed."""
        self._begun = True
        self._follower.stop()
        await self._follower.wait_ended()
        self._follower.entries.close(discard=True)

    async def __aenter__(self) -> Watch:
        self._begin()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        self._follower.stop()


class _Follower:
    """The background half of a :class:`Watch`: (re)connects, watches, hands entries over."""

    def __init__(self, client: Channel, agent_id: str, after_seq: int | None, retry_s: float):
        self.client = client
        self.agent_id = agent_id
        #: The last seq handed over; from the first answer on, never ``None`` again:
        #: a reconnect resumes where the first watch began, not from "now".
        self.cursor = after_seq
        self.retry_s = retry_s
        self.entries: Handover[JournalEntry] = Handover(math.inf)
        self.error: Exception | None = None
        self.scope = anyio.CancelScope()
        self.started = False
        self.ended = anyio.Event()

    def stop(self) -> None:
        self.scope.cancel()

    async def wait_ended(self) -> None:
        if self.started:
            with anyio.CancelScope(shield=True):
                await self.ended.wait()

    async def run(self) -> None:
        self.started = True
        try:
            with self.scope:
                while True:
                    try:
                        async with self.client.reconnect() as connection:
                            await self._watch(connection)
                    except (DaemonNotRunningError, ConnectionClosedError, OSError):
                        await anyio.sleep(self.retry_s)  # the daemon restarts, or the network
        except Exception as error:  # the consumer's, raised where it iterates
            self.error = error
        finally:
            self.entries.close()
            self.ended.set()

    async def _watch(self, connection: Channel) -> None:
        """One connection's watch: its entries until the connection ends."""

        async def deliver(seq: int, entry: dict[str, Any]) -> None:
            self.cursor = seq
            await self.entries.put(JournalEntry(self.agent_id, seq, entry))

        with connection.routes.journal(self.agent_id, deliver):
            params: dict[str, Any] = {"agentId": self.agent_id}
            if self.cursor is not None:
                params["afterSeq"] = self.cursor
            call = await connection.start_request("agent/watch", params)
            try:
                answer = await call.wait()
            except ConnectionClosedError:
                raise  # dropped before the answer: reconnect
            except WireError as error:
                raise client_error(error) from None
            if self.cursor is None:
                self.cursor = int(answer["seq"])
            await connection.closed.wait()
        raise ConnectionClosedError("the watch connection closed")
