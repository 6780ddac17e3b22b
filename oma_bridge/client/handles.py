"""Handles of what a client opened on the daemon: an agent, a stream of its run, its journal."""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from oma_bridge.client.errors import raise_for
from oma_bridge.errors import WireError
from oma_bridge.results import AgentRunResult, StreamEvent

if TYPE_CHECKING:
    from oma_bridge.client.connection import Client

__all__ = ["JournalEntry", "RemoteAgent", "RemoteStream", "new_run_id"]


class RemoteAgent:
    """An agent opened on the daemon; the methods mirror :class:`~oma_bridge.Agent`."""

    def __init__(
        self,
        client: Client,
        agent_id: str,
        profile: str,
        before_run: Callable[..., Any] | None,
        after_run: Callable[..., Any] | None,
    ) -> None:
        self.client = client
        self.agent_id = agent_id
        self.profile = profile
        self.before_run = before_run
        self.after_run = after_run

    async def run(
        self, run_input: str | Sequence[Any], *, run_id: str | None = None
    ) -> AgentRunResult:
        params = {"agentId": self.agent_id, "input": run_input, "runId": run_id or new_run_id()}
        return AgentRunResult.from_wire(await self.client.request("agent/run", params))

    async def prompt(
        self, prompt_input: str | Sequence[Any], *, run_id: str | None = None
    ) -> AgentRunResult:
        params = {"agentId": self.agent_id, "input": prompt_input, "runId": run_id or new_run_id()}
        return AgentRunResult.from_wire(await self.client.request("agent/prompt", params))

    def stream(self, run_input: str | Sequence[Any], *, run_id: str | None = None) -> RemoteStream:
        """Events as the daemon relays them; ``result`` is set once the stream ends."""
        return RemoteStream(self.client, self.agent_id, run_input, run_id or new_run_id())

    async def history(self) -> list[Any]:
        answer = await self.client.request("agent/history", {"agentId": self.agent_id})
        return list(answer["messages"])

    async def reset(self) -> None:
        await self.client.request("agent/reset", {"agentId": self.agent_id})

    async def close(self) -> None:
        await self.client.request("agent/close", {"agentId": self.agent_id})
        self.client._agents.pop(self.agent_id, None)

    async def cancel(self, run_id: str) -> bool:
        return await self.client.cancel(run_id)

    def watch(
        self, *, after_seq: int | None = None, retry_s: float = 0.2
    ) -> AsyncIterator[JournalEntry]:
        """The agent's journal entries after ``after_seq`` (default: from now), then live ones.

        It reconnects by itself when the connection drops (after ``retry_s``)
        and resumes after the last ``seq`` it yielded, so a dropped connection
        costs no entry.  Close it when done (``contextlib.aclosing``, or
        ``break`` inside ``async with aclosing(agent.watch()) as entries``):
        it holds a connection of its own.
        """
        return self.client.watch(self.agent_id, after_seq=after_seq, retry_s=retry_s)


@dataclass(frozen=True)
class JournalEntry:
    """One ``agent/event``: an entry of an agent's journal (``docs/sessions.md``)."""

    agent_id: str
    seq: int
    #: ``{"type": "run_start" | "event" | "run_end" | "update" | "note", ...}``
    entry: dict[str, Any]

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
    """The events of one ``agent/stream`` call, in wire order."""

    def __init__(
        self, client: Client, agent_id: str, run_input: str | Sequence[Any], run_id: str
    ) -> None:
        self.client = client
        self.agent_id = agent_id
        self.run_id = run_id
        self.result: AgentRunResult | None = None
        self._input = run_input
        self._events: MemoryObjectReceiveStream[StreamEvent] | None = None

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[StreamEvent]:
        # Unbounded on purpose: the reader must never block on a slow
        # consumer, and the daemon bounds what it sends per connection.
        send, receive = anyio.create_memory_object_stream[StreamEvent](math.inf)
        self.client._streams[self.run_id] = send
        params = {"agentId": self.agent_id, "input": self._input, "runId": self.run_id}
        failure: BaseException | None = None
        try:
            call = await self.client.peer.start_request("agent/stream", params)

            async def settle() -> None:
                nonlocal failure
                try:
                    self.result = AgentRunResult.from_wire(await call.wait())
                except Exception as error:  # re-raised below, outside the task group
                    failure = error
                finally:
                    send.close()

            async with anyio.create_task_group() as tg, receive:
                tg.start_soon(settle)
                async for event in receive:
                    yield event
        finally:
            self.client._streams.pop(self.run_id, None)
        if isinstance(failure, WireError):
            raise_for(failure)
        if failure is not None:
            raise failure

    async def cancel(self) -> bool:
        return await self.client.cancel(self.run_id)


def new_run_id() -> str:
    return uuid.uuid4().hex
