"""An ACP agent for team runs, on the official Python SDK's agent side.

Each turn answers ``session=<id> turn=<n>`` and, on the next line, the text
it received (so a test sees the system prompt go with the first turn only).
A prompt whose last line is ``WAIT`` holds the turn until ``session/cancel``.
It appends ``start <pid>``, ``new <session>`` and ``prompt <session> <n>``
lines to the file named by ``ACP_TEAM_LOG``.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import acp
from acp import schema


def _log(line: str) -> None:
    with Path(os.environ["ACP_TEAM_LOG"]).open("a") as log:
        log.write(line + "\n")


class TeamAgent:
    def __init__(self) -> None:
        self.conn: Any = None
        self.turns: dict[str, int] = {}
        self.cancelled: dict[str, asyncio.Event] = {}

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=1,
            agent_capabilities=schema.AgentCapabilities(),
            agent_info=schema.Implementation(name="team-agent", version="1.0"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> schema.NewSessionResponse:
        session_id = f"team-{os.getpid()}-{len(self.turns) + 1}"
        self.turns[session_id] = 0
        self.cancelled[session_id] = asyncio.Event()
        _log(f"new {session_id}")
        return schema.NewSessionResponse(session_id=session_id)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled[session_id].set()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> Any:
        text = "".join(getattr(block, "text", "") for block in prompt)
        self.turns[session_id] += 1
        turn = self.turns[session_id]
        _log(f"prompt {session_id} {turn}")
        self.cancelled[session_id] = asyncio.Event()
        if text.splitlines()[-1].strip() == "WAIT":
            await self.cancelled[session_id].wait()
            return schema.PromptResponse(stop_reason="cancelled")
        answer = f"session={session_id} turn={turn}\n{text}"
        await self.conn.session_update(session_id, acp.update_agent_message_text(answer))
        return schema.PromptResponse(stop_reason="end_turn")


if __name__ == "__main__":
    _log(f"start {os.getpid()}")
    asyncio.run(acp.run_agent(TeamAgent()))  # type: ignore[arg-type]
