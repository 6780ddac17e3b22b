"""An ACP client on the official Python SDK (``agent-client-protocol``), driven by a JSON script.

Run as a script, not imported: inside pytest ``tests/acp`` would shadow the
SDK's ``acp`` package.  It spawns ``command`` with ``spawn_agent_process``
(here: the shim, ``oma-bridge acp <profile>``) and runs the steps in order.

Usage: ``python sdk_client.py`` with the script on stdin::

    {"command": ["oma-bridge", "acp", "echo"], "env": {...}, "cwd": "/abs",
     "permission": "allow" | "reject" | "cancel",
     "steps": [{"op": ...}, ...]}

Steps (``sessionId`` defaults to the last one new/load/resume named):

* ``initialize {protocolVersion?}``
* ``new {cwd?}``, ``load {sessionId?, cwd?}``, ``resume {sessionId?, cwd?}``
* ``prompt {text?, images?: [{data, mimeType}], cancelAfter?: K, wait?: false}``
  (``cancelAfter``: send ``session/cancel`` once the turn got K message chunks;
  ``wait: false``: do not wait for the answer, go on with the next step)
* ``cancel``, ``list {cwd?}``, ``close``
* ``until {chunks: K}`` (wait for K agent_message_chunk updates in all),
  ``sleep {ms}``, ``hang`` (wait forever: the test kills the client), ``die``
  (SIGKILL to the client's process group: it and its shim vanish mid-turn, as
  a crashed editor does; the test starts the client as a group leader)

Output, one JSON object a line, flushed, in the order things happened:
``{"type": "update", "sessionId", "update"}`` (the SDK's model dumped by
alias), ``{"type": "response", "op", "result" | "error": {code, message,
data}}``, ``{"type": "permission", "toolCallId", "optionId"}``, ``{"type":
"process", "pid"}`` (the spawned agent), and ``{"type": "done"}`` last.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import acp
from acp import RequestError, schema


def out(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def dump(model: Any) -> Any:
    if model is None:
        return None
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


class Recorder:
    """The client side: records every update, answers permission requests by the policy."""

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.chunks = 0
        self.changed = asyncio.Event()
        self.cancel_after: tuple[int, Any] | None = None

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        out({"type": "update", "sessionId": session_id, "update": dump(update)})
        if getattr(update, "session_update", None) == "agent_message_chunk":
            self.chunks += 1
            self.changed.set()
            self.changed = asyncio.Event()
            if self.cancel_after is not None and self.chunks >= self.cancel_after[0]:
                target, self.cancel_after = self.cancel_after[1], None
                await target()

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> schema.RequestPermissionResponse:
        wanted = {"allow": "allow_once", "reject": "reject_once"}.get(self.policy)
        chosen = next((o.option_id for o in options if o.kind == wanted), None)
        out({"type": "permission", "toolCallId": tool_call.tool_call_id, "optionId": chosen})
        if chosen is None:
            return schema.RequestPermissionResponse(
                outcome=schema.DeniedOutcome(outcome="cancelled")
            )
        return schema.RequestPermissionResponse(
            outcome=schema.AllowedOutcome(outcome="selected", option_id=chosen)
        )


def blocks(step: dict[str, Any]) -> list[Any]:
    prompt: list[Any] = []
    if "text" in step:
        prompt.append(acp.text_block(step["text"]))
    for image in step.get("images", []):
        prompt.append(acp.image_block(image["data"], image["mimeType"]))
    return prompt


async def run(script: dict[str, Any]) -> None:
    client = Recorder(script.get("permission", "allow"))
    cwd = script.get("cwd") or str(Path.cwd())
    env = {**os.environ, **script.get("env", {})}
    command, *args = script["command"]
    state: dict[str, Any] = {"session": None}
    background: list[asyncio.Task[None]] = []
    async with acp.spawn_agent_process(client, command, *args, env=env, cwd=cwd) as (conn, proc):
        out({"type": "process", "pid": proc.pid})

        async def call(op: str, step: dict[str, Any]) -> Any:
            sid = step.get("sessionId") or state["session"]
            if op == "initialize":
                return await conn.initialize(protocol_version=step.get("protocolVersion", 1))
            if op == "new":
                answer = await conn.new_session(cwd=step.get("cwd", cwd), mcp_servers=[])
                state["session"] = answer.session_id
                return answer
            if op in ("load", "resume"):
                method = conn.load_session if op == "load" else conn.resume_session
                kwargs = {"mcp_servers": []} if op == "load" else {}
                answer = await method(cwd=step.get("cwd", cwd), session_id=sid, **kwargs)
                state["session"] = sid
                return answer
            if op == "prompt":
                if "cancelAfter" in step:
                    client.cancel_after = (step["cancelAfter"], lambda: conn.cancel(session_id=sid))
                return await conn.prompt(session_id=sid, prompt=blocks(step))
            if op == "cancel":
                return await conn.cancel(session_id=sid)
            if op == "list":
                return await conn.list_sessions(cwd=step.get("cwd"))
            if op == "close":
                return await conn.close_session(session_id=sid)
            if op == "until":
                while client.chunks < step["chunks"]:
                    await client.changed.wait()
                return None
            if op == "sleep":
                return await asyncio.sleep(step["ms"] / 1000)
            if op == "die":
                os.killpg(os.getpgrp(), signal.SIGKILL)  # this client and its shim, at once
            if op == "hang":
                return await asyncio.Event().wait()
            raise ValueError(f"unknown op {op!r}")

        async def step_of(step: dict[str, Any]) -> None:
            op = step["op"]
            try:
                answer = await call(op, step)
            except RequestError as error:
                failure = {"code": error.code, "message": str(error), "data": error.data}
                out({"type": "response", "op": op, "error": failure})
            except Exception as error:  # the SDK refused something: say so, go on
                out({"type": "response", "op": op, "error": {"message": repr(error)}})
            else:
                out({"type": "response", "op": op, "result": dump(answer)})

        for step in script["steps"]:
            if step.get("wait", True):
                await step_of(step)
            else:
                background.append(asyncio.create_task(step_of(step)))
        await asyncio.gather(*background)
    out({"type": "done"})


if __name__ == "__main__":
    asyncio.run(run(json.load(sys.stdin)))
