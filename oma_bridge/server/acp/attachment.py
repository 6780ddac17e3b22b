"""One ACP connection attached to one session: :class:`Attachment`.

The facade (:mod:`.facade`) attaches a connection to a session at
``session/new``, ``session/load`` and ``session/resume``, and for the
replay of ``session/load``; the attachment follows the agent's journal and
sends each entry's updates to its client, and answers for it when the agent
asks who can grant a tool, answer an elicitation or serve ``fs/*``.
"""

from __future__ import annotations

from typing import Any

import anyio

from oma_bridge.backends import ElicitationRequest, PermissionRequest
from oma_bridge.server.acp.mapping import UpdateFrames
from oma_bridge.server.agents.journal import Entry, Journal
from oma_bridge.server.agents.registry import HostedAgent
from oma_bridge.server.session import Session
from oma_bridge.waiting import Signal

__all__ = ["Attachment"]


class Attachment:
    """One ACP connection attached to one session: it follows the agent's journal.

    It is one of the agent's paced readers from its creation to :meth:`detach`:
    a turn waits before it journals an entry that would trim one this client
    has yet to be sent, so no update is lost
    (a client that stops reading is dropped by the connection's send watchdog,
    which detaches it).  It follows the journal live (:meth:`Journal.follow`):
    caught up, it sends an entry's update from the task that journals it, and
    its own task wakes only to catch up.
    """

    def __init__(
        self,
        session: Session,
        hosted: HostedAgent,
        cursor: int,
        capabilities: dict[str, Any] | None = None,
    ) -> None:
        self.session = session
        #: The client's ``clientCapabilities`` (who can answer what, PROTOCOL §12.7).
        self.capabilities = capabilities or {}
        self.hosted = hosted
        self.journal: Journal = hosted.journal
        self.cursor = cursor
        self._frames = UpdateFrames(hosted.agent_id)
        #: Set by :meth:`detach`: this connection no longer follows the session.
        self.detached = False
        self._moved = Signal()
        self._behind = Signal()
        self._sending = False
        self._scope = anyio.CancelScope()
        hosted.paced.add(self)

    def permission_params(self, request: PermissionRequest) -> dict[str, Any]:
        """The agent's params as it sent them (``_meta`` of the request, the tool call and the
        options included), in this session (PROTOCOL §12.7)."""
        if request.acp_params is not None:
            return {"sessionId": self.hosted.agent_id, **request.acp_params}
        return {
            "sessionId": self.hosted.agent_id,
            "toolCall": dict(request.tool_call),
            "options": [
                {"optionId": o.option_id, "name": o.name, "kind": o.kind} for o in request.options
            ],
        }

    def elicitation_params(self, request: ElicitationRequest) -> dict[str, Any] | None:
        """Only for a client that advertised the request's mode (``elicitation.form``/``url``)."""
        if not self.elicits(request.mode):
            return None
        return {"sessionId": self.hosted.agent_id, **request.params}

    def elicits(self, mode: str) -> bool:
        modes = self.capabilities.get("elicitation")
        return isinstance(modes, dict) and isinstance(modes.get(mode), dict)

    def serves(self, method: str) -> bool:
        """``fs/*`` and ``terminal/*`` by the ``clientCapabilities`` of ``initialize``."""
        if method.startswith("terminal/"):
            return self.capabilities.get("terminal") is True
        fs = self.capabilities.get("fs")
        wanted = {"fs/read_text_file": "readTextFile", "fs/write_text_file": "writeTextFile"}
        return isinstance(fs, dict) and method in wanted and fs.get(wanted[method]) is True

    async def send_until_caught_up(self, *, replay: bool) -> None:
        journal = self.journal
        self._sending = True
        try:
            while self.cursor < journal.last_seq:
                for entry in journal.after(max(self.cursor, journal.oldest_seq - 1)):
                    journal.take(entry)
                    for frame in self._frames.of(entry.data, replay=replay):
                        await self.session.notify_encoded(frame)
                    self.cursor = entry.seq
                    self._moved.notify()
        finally:
            self._sending = False

    def appended(self, entry: Entry) -> None:
        """The journal's hand-over (a journal follower): sent now, or the pump wakes."""
        if not self._sending and not self.detached and entry.seq == self.cursor + 1:
            frames = self._frames.of(entry.data, replay=False)
            if not frames or (len(frames) == 1 and self.session.offer(frames[0])):
                self.journal.take(entry)
                self.cursor = entry.seq
                self._moved.notify()
                return
        self._behind.notify()

    async def pump(self) -> None:
        """Send every new entry's updates until detached or the connection ends."""
        journal = self.journal
        journal.follow(self)
        try:
            with self._scope:
                while not self.session.closed:
                    if self.cursor >= journal.last_seq:
                        await self._behind.wait()
                    else:
                        await self.send_until_caught_up(replay=False)
        finally:
            journal.unfollow(self)

    def would_lose(self, size: int) -> bool:
        return not self.detached and self.journal.would_drop(self.cursor, size)

    async def keep_up(self, size: int) -> None:
        journal = self.journal
        while journal.would_drop(self.cursor, size) and not self.detached:
            if self.session.closed:
                return
            await self._moved.wait()

    async def delivered(self, seq: int) -> None:
        """Return once this client has been sent every update up to entry ``seq``.

        Also once it is detached (the session was closed, or this connection
        attached anew): nothing more will be sent through this attachment.
        """
        while self.cursor < seq and not self.detached and not self.session.closed:
            await self._moved.wait()

    def detach(self) -> None:
        self.detached = True
        self._scope.cancel()
        self.hosted.paced.discard(self)
        if self.hosted.acp_clients.get(self.session) is self:
            del self.hosted.acp_clients[self.session]
        self._moved.notify()
