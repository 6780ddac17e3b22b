"""Drives the demo agent with the official ACP SDK's client side; prints a JSON summary.

Run as a script (``tests/acp`` would shadow the SDK's ``acp`` package inside
pytest).  Usage: ``python sdk_client.py <cwd> <prompt>...``; one line of JSON
per prompt: the stop reason, the update kinds, the message text and the
permission options the agent offered.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import acp
from acp import schema


class RecordingClient:
    def __init__(self) -> None:
        self.updates: list[Any] = []
        self.asked: list[list[str]] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> schema.RequestPermissionResponse:
        self.asked.append([option.kind for option in options])
        return schema.RequestPermissionResponse(
            outcome=schema.AllowedOutcome(outcome="selected", option_id="allow-once")
        )


async def main(cwd: str, prompts: list[str]) -> None:
    client = RecordingClient()
    command = [sys.executable, "-m", "oma_bridge.demo.acp_agent"]
    async with acp.spawn_agent_process(client, *command, cwd=cwd) as (conn, _process):
        init = await conn.initialize(protocol_version=1)
        info = init.agent_info
        print(json.dumps({"protocolVersion": init.protocol_version, "name": info and info.name}))
        session = await conn.new_session(cwd=cwd, mcp_servers=[])
        for prompt in prompts:
            client.updates.clear()
            client.asked.clear()
            blocks = [acp.text_block(prompt)]
            answer = await conn.prompt(session_id=session.session_id, prompt=blocks)
            summary = {
                "stopReason": answer.stop_reason,
                "kinds": [u.session_update for u in client.updates],
                "statuses": [getattr(u, "status", None) for u in client.updates],
                "text": "".join(
                    u.content.text
                    for u in client.updates
                    if u.session_update == "agent_message_chunk"
                ),
                "asked": client.asked,
                "sessionId": session.session_id,
            }
            print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
