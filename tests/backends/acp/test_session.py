"""``AcpSession`` as a state machine, over a transport that is not stdio.

An in-process ACP agent (the project's own JSON-RPC peer on memory streams)
stands behind an :class:`AgentTransport` of the test's own: the session, its
states and its turns run unchanged, which is the seam a WebSocket transport
plugs into.  The real agents over stdio are the suites of ``tests/acp``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from oma_bridge.backends.acp.agent_requests import AgentRequests
from oma_bridge.backends.acp.config import AcpConfig
from oma_bridge.backends.acp.handshake import Handshake, openers
from oma_bridge.backends.acp.schema import AgentCapabilities
from oma_bridge.backends.acp.services import ClientServices
from oma_bridge.backends.acp.session import AcpSession, SessionState
from oma_bridge.backends.acp.terminal import Terminals
from oma_bridge.backends.acp.transport import BeforeWait
from oma_bridge.backends.acp.turn import Turn
from oma_bridge.backends.acp.turn_state import TurnState
from oma_bridge.results import StreamEvent
from oma_bridge.rpc import Peer

pytestmark = pytest.mark.anyio


def test_the_session_is_continued_with_resume_then_load_then_a_new_one() -> None:
    both = AgentCapabilities.model_validate(
        {"loadSession": True, "sessionCapabilities": {"resume": {}}}
    )
    load_only = AgentCapabilities.model_validate({"loadSession": True})
    neither = AgentCapabilities.model_validate({})
    assert openers(both, "s-1") == ("session/resume", "session/load", "session/new")
    assert openers(load_only, "s-1") == ("session/load", "session/new")
    assert openers(neither, "s-1") == ("session/new",)
    assert openers(both, None) == ("session/new",)


class MemoryTransport:
    """An agent reached over memory streams: no process, no pid."""

    def __init__(
        self,
        send: anyio.abc.ObjectSendStream[bytes],
        receive: anyio.abc.ObjectReceiveStream[bytes],
    ) -> None:
        self._send, self._receive = send, receive
        self._before_wait: BeforeWait | None = None
        self.closed = False

    pid = None

    @property
    def gone(self) -> bool:
        return self.closed

    def set_before_wait(self, hook: BeforeWait | None) -> None:
        self._before_wait = hook

    async def send(self, data: bytes) -> None:
        await self._send.send(data)

    async def receive(self) -> object | None:
        if self._before_wait is not None and not self._receive.statistics().current_buffer_used:
            await self._before_wait()
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return None

    def describe_end(self) -> str:
        return "closed its connection"

    def diagnostics(self) -> str:
        return ""

    async def wait_gone(self, seconds: float) -> None:
        return None

    async def close(self, grace_s: float) -> None:
        self.closed = True
        await self._send.aclose()


class SlowAgent:
    """Answers a prompt with one chunk, or, for ``wait``, only once it is cancelled."""

    def __init__(self) -> None:
        self.cancelled = anyio.Event()
        self.peer: Peer | None = None
        #: The client session's state when ``session/cancel`` came.
        self.state_at_cancel: SessionState | None = None
        self.session: AcpSession | None = None

    async def on_request(self, method: str, params: Any) -> Any:
        assert self.peer is not None
        if method == "initialize":
            return {"protocolVersion": 1}
        if method == "session/new":
            return {"sessionId": "s-1"}
        if method == "session/prompt":
            text = params["prompt"][0]["text"]
            content = {"type": "text", "text": text}
            update = {"sessionUpdate": "agent_message_chunk", "content": content}
            await self.peer.notify("session/update", {"sessionId": "s-1", "update": update})
            if text == "wait":
                await self.cancelled.wait()
                return {"stopReason": "cancelled"}
            return {"stopReason": "end_turn"}
        raise AssertionError(method)

    async def on_notification(self, method: str, params: Any) -> None:
        if method == "session/cancel":
            assert self.session is not None
            self.state_at_cancel = self.session.state
            self.cancelled.set()


@asynccontextmanager
async def a_session(
    tmp_path: Path,
) -> AsyncIterator[tuple[AcpSession, MemoryTransport, SlowAgent]]:
    to_agent_send, to_agent_receive = anyio.create_memory_object_stream[bytes](100)
    to_client_send, to_client_receive = anyio.create_memory_object_stream[bytes](100)
    transport = MemoryTransport(to_agent_send, to_client_receive)
    agent = SlowAgent()

    async def agent_receive() -> object | None:
        try:
            return await to_agent_receive.receive()
        except anyio.EndOfStream:
            return None

    agent.peer = Peer(
        to_client_send.send,
        agent_receive,
        on_request=agent.on_request,
        on_notification=agent.on_notification,
    )
    config = AcpConfig(command="unused", cwd=tmp_path, cancel_grace_s=5.0)
    requests = AgentRequests(config, tmp_path, Terminals(tmp_path), label="mem")
    session = AcpSession(transport, requests, label="mem", cancel_grace_s=5.0, stop_grace_s=1.0)
    agent.session = session
    async with agent.peer:
        try:
            yield session, transport, agent
        finally:
            await session.end()


def a_turn(events: list[StreamEvent]) -> TurnState:
    async def emit(event: StreamEvent) -> None:
        events.append(event)

    return TurnState("r1", Turn(1, emit))


async def test_a_session_goes_spawned_ready_prompting_ready_dead(tmp_path: Path) -> None:
    async with a_session(tmp_path) as (session, transport, _):
        assert session.state is SessionState.SPAWNED and session.pid is None
        with pytest.raises(RuntimeError, match="no transition from spawned to prompting"):
            await session.prompt(a_turn([]), {})
        opened = await session.open(handshake(tmp_path), None, ClientServices())
        assert (opened.session_id, opened.continued) == ("s-1", False)
        assert session.state is SessionState.READY
        events: list[StreamEvent] = []
        turn = a_turn(events)
        answer = await session.prompt(turn, prompt("hello"))
        assert answer == {"stopReason": "end_turn"}
        assert [e.data for e in events if e.type == "text"] == ["hello"]
        assert session.state is SessionState.READY and turn.finished and session.turn is None
        await session.end()
        assert session.state is SessionState.DEAD and transport.closed
        await session.end()  # again: still dead, nothing raised


async def test_a_cancelled_prompt_goes_through_cancelling_back_to_ready(tmp_path: Path) -> None:
    async with a_session(tmp_path) as (session, _, agent):
        await session.open(handshake(tmp_path), None, ClientServices())
        turn = a_turn([])
        with anyio.move_on_after(0.5) as waited:
            await session.prompt(turn, prompt("wait"))
        assert waited.cancelled_caught
        assert agent.state_at_cancel is SessionState.CANCELLING
        assert session.state is SessionState.READY
        assert turn.phase == "cancelling" and not turn.asks_user
        assert (await session.prompt(a_turn([]), prompt("again"))) == {"stopReason": "end_turn"}


def handshake(tmp_path: Path) -> Handshake:
    return Handshake(AcpConfig(command="unused", cwd=tmp_path), tmp_path, "mem", None, {})


def prompt(text: str) -> dict[str, Any]:
    return {"sessionId": "s-1", "prompt": [{"type": "text", "text": text}]}
