"""The seam between an ACP session and the way its messages reach the agent.

An :class:`~oma_bridge.backends.acp.session.AcpSession` speaks JSON-RPC over
an :class:`AgentTransport` and knows nothing else of it.  Today the one
transport is a child process over stdio (:class:`~oma_bridge.backends.acp.stdio.AgentProcess`);
a remote agent over a WebSocket (the ACP RFD "Streamable HTTP & WebSocket
Transport", one JSON-RPC message per text frame) plugs in as a second one,
and a sandboxed process as a stdio one started another way: the session,
its states and its turns stay as they are.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, TypeAlias

__all__ = ["AgentTransport", "BeforeWait", "Connect"]

#: Awaited whenever the next receive would wait for the agent (the session
#: flushes the text it holds back there, see ``Turn.flush``).
BeforeWait: TypeAlias = Callable[[], Awaitable[None]]


class AgentTransport(Protocol):
    """One connection to one ACP agent: messages both ways, and how it ended."""

    @property
    def pid(self) -> int | None:
        """The agent's process (group) id when it is a child of ours, else ``None``."""
        ...

    @property
    def gone(self) -> bool:
        """Whether the agent's end went away by itself (its process exited, its socket closed)."""
        ...

    def set_before_wait(self, hook: BeforeWait | None) -> None:
        """Await ``hook`` whenever :meth:`receive` would wait for the agent."""

    async def send(self, data: bytes) -> None:
        """Send one encoded JSON-RPC message (or batch)."""

    async def receive(self) -> object | None:
        """The next decoded message, or ``None`` at the end of input.

        Cancel-safe: the session reads only while a run (or a request) waits
        on it, so a read is cancelled between runs and taken up again later.
        """

    def describe_end(self) -> str:
        """How the agent ended, for an error message (``"exited with code 3"``)."""
        ...

    def diagnostics(self) -> str:
        """What the agent said outside the protocol (a process's stderr tail), redacted."""
        ...

    async def wait_gone(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the agent's end to finish going (an exit status)."""

    async def close(self, grace_s: float) -> None:
        """End the agent for good (a process's whole tree, within ``grace_s`` + 2 s).

        Shielded, and safe to call again: every call returns once the agent is gone.
        """


#: Opens a transport to a new agent (spawns it, connects to it); ``OSError`` when it cannot.
Connect: TypeAlias = Callable[[], Awaitable[AgentTransport]]
