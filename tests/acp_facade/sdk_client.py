"""An ACP client on the official Python SDK (``agent-client-protocol``), driven by a JSON script.

Run as a script, not imported: inside pytest ``tests/acp`` would shadow the
SDK's ``acp`` package.  It spawns ``command`` with ``spawn_agent_process``
(here: the shim, ``oma-bridge acp <profile>``) and runs the steps in order.

Usage: ``python sdk_client.py`` with the script on stdin::

    {"command": ["oma-bridge", "acp", "echo"], "env": {...}, "trim": false, "cwd": "/abs",
     "permission": "allow" | "reject" | "cancel",
     "editor": {"buffers": {"/abs/path": "unsaved text"}, "fs": true, "terminal": true},
     "steps": [{"op": ...}, ...]}

``env`` is added to this process's environment for the agent, or with
``trim`` to only what ``spawn_agent_process`` keeps of it by itself (HOME,
LOGNAME, PATH, SHELL, TERM, USER): the environment an SDK-started agent gets.

With ``editor`` the client is an editor: ``initialize`` advertises
``fs.readTextFile``/``fs.writeTextFile`` (``fs``) and ``terminal``, reads
are answered from its unsaved ``buffers`` (a path with no buffer: error
-32002, as an editor with no such file), writes land in the buffers (never
on disk), and terminals are real subprocesses the client runs itself.

Steps (``sessionId`` defaults to the last one new/load/resume named):

* ``initialize {protocolVersion?}``
* ``new {cwd?}``, ``load {sessionId?, cwd?}``, ``resume {sessionId?, cwd?}``,
  ``fork {sessionId?, cwd?}`` (``fork_session``: the fork becomes the session the next
  steps name)
* ``prompt {text?, images?: [{data, mimeType}], meta?: {...}, cancelAfter?: K, wait?: false}``
  (``meta``: the request's ``_meta``)
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
data}}``, ``{"type": "permission", "toolCallId", "optionId", "toolCall", "options",
"meta"}`` (the request as the SDK parsed it), ``{"type": "client", "method",
"params"}`` (an ``fs/*`` or ``terminal/*`` request the editor served),
``{"type": "process", "pid"}`` (the spawned agent), ``{"type": "agent_stderr",
"text"}`` (what the agent wrote on stderr, once it is gone), ``{"type": "buffers",
"buffers"}`` (an editor's buffers at the end), and ``{"type": "done"}`` last.
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
        out(
            {
                "type": "permission",
                "toolCallId": tool_call.tool_call_id,
                "optionId": chosen,
                "toolCall": dump(tool_call),
                "options": [dump(option) for option in options],
                "meta": kwargs,
            }
        )
        if chosen is None:
            return schema.RequestPermissionResponse(
                outcome=schema.DeniedOutcome(outcome="cancelled")
            )
        return schema.RequestPermissionResponse(
            outcome=schema.AllowedOutcome(outcome="selected", option_id=chosen)
        )


class Editor(Recorder):
    """An editor: unsaved buffers for ``fs/*``, its own subprocesses for ``terminal/*``."""

    def __init__(self, policy: str, buffers: dict[str, str]) -> None:
        super().__init__(policy)
        self.buffers = dict(buffers)
        self.terminals: dict[str, tuple[asyncio.subprocess.Process, bytearray, int | None]] = {}
        self.readers: dict[str, asyncio.Task[None]] = {}

    def served(self, method: str, **params: Any) -> None:
        out({"type": "client", "method": method, "params": params})

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> schema.ReadTextFileResponse:
        self.served("fs/read_text_file", sessionId=session_id, path=path)
        if path not in self.buffers:
            raise RequestError(-32002, f"no buffer for {path}")
        return schema.ReadTextFileResponse(content=self.buffers[path])

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> schema.WriteTextFileResponse:
        self.served("fs/write_text_file", sessionId=session_id, path=path, content=content)
        self.buffers[path] = content  # the editor's buffer, not the disk
        return schema.WriteTextFileResponse()

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[Any] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> schema.CreateTerminalResponse:
        self.served("terminal/create", sessionId=session_id, command=command, args=args, cwd=cwd)
        extra = {variable.name: variable.value for variable in env or []}
        process = await asyncio.create_subprocess_exec(
            command,
            *(args or []),
            cwd=cwd,
            env={**os.environ, **extra},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        terminal_id = f"editor-term-{len(self.terminals) + 1}"
        output = bytearray()
        self.terminals[terminal_id] = (process, output, output_byte_limit)

        async def read() -> None:
            assert process.stdout is not None
            while chunk := await process.stdout.read(4096):
                output.extend(chunk)

        self.readers[terminal_id] = asyncio.create_task(read())
        return schema.CreateTerminalResponse(terminal_id=terminal_id)

    def _exit(self, process: asyncio.subprocess.Process) -> schema.TerminalExitStatus | None:
        code = process.returncode
        if code is None:
            return None
        if code < 0:
            return schema.TerminalExitStatus(signal=signal.Signals(-code).name)
        return schema.TerminalExitStatus(exit_code=code)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> schema.TerminalOutputResponse:
        self.served("terminal/output", sessionId=session_id, terminalId=terminal_id)
        process, output, limit = self.terminals[terminal_id]
        if process.returncode is not None:
            await self.readers[terminal_id]
        data = bytes(output)
        truncated = limit is not None and len(data) > limit
        text = data[-limit:] if truncated and limit is not None else data
        return schema.TerminalOutputResponse(
            output=text.decode(errors="replace"),
            truncated=truncated,
            exit_status=self._exit(process),
        )

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> schema.WaitForTerminalExitResponse:
        self.served("terminal/wait_for_exit", sessionId=session_id, terminalId=terminal_id)
        process = self.terminals[terminal_id][0]
        await process.wait()
        await self.readers[terminal_id]
        status = self._exit(process)
        assert status is not None
        return schema.WaitForTerminalExitResponse(exit_code=status.exit_code, signal=status.signal)

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> schema.KillTerminalResponse:
        self.served("terminal/kill", sessionId=session_id, terminalId=terminal_id)
        process = self.terminals[terminal_id][0]
        if process.returncode is None:
            process.kill()
        return schema.KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> schema.ReleaseTerminalResponse:
        self.served("terminal/release", sessionId=session_id, terminalId=terminal_id)
        process = self.terminals.pop(terminal_id)[0]
        if process.returncode is None:
            process.kill()
        await process.wait()
        await self.readers.pop(terminal_id)
        return schema.ReleaseTerminalResponse()


def capabilities(editor: dict[str, Any] | None) -> schema.ClientCapabilities | None:
    if editor is None:
        return None
    fs = bool(editor.get("fs", True))
    return schema.ClientCapabilities(
        fs=schema.FileSystemCapabilities(read_text_file=fs, write_text_file=fs),
        terminal=bool(editor.get("terminal", True)),
    )


def blocks(step: dict[str, Any]) -> list[Any]:
    prompt: list[Any] = []
    if "text" in step:
        prompt.append(acp.text_block(step["text"]))
    for image in step.get("images", []):
        prompt.append(acp.image_block(image["data"], image["mimeType"]))
    return prompt


async def run(script: dict[str, Any]) -> None:
    editor = script.get("editor")
    policy = script.get("permission", "allow")
    client = Recorder(policy) if editor is None else Editor(policy, editor.get("buffers", {}))
    cwd = script.get("cwd") or str(Path.cwd())
    env = (
        dict(script.get("env", {}))
        if script.get("trim")
        else {**os.environ, **script.get("env", {})}
    )
    command, *args = script["command"]
    state: dict[str, Any] = {"session": None}
    background: list[asyncio.Task[None]] = []
    async with acp.spawn_agent_process(client, command, *args, env=env, cwd=cwd) as (conn, proc):
        out({"type": "process", "pid": proc.pid})
        assert proc.stderr is not None
        stderr = asyncio.create_task(proc.stderr.read())  # read all along: a full pipe would block

        async def call(op: str, step: dict[str, Any]) -> Any:
            sid = step.get("sessionId") or state["session"]
            if op == "initialize":
                return await conn.initialize(
                    protocol_version=step.get("protocolVersion", 1),
                    client_capabilities=capabilities(editor),
                    client_info=None
                    if editor is None
                    else schema.Implementation(name="python-sdk-editor", version="1"),
                )
            if op == "new":
                answer = await conn.new_session(cwd=step.get("cwd", cwd), mcp_servers=[])
                state["session"] = answer.session_id
                return answer
            if op == "fork":  # the SDK's fork_session (unstable in ACP v1); the fork is current
                answer = await conn.fork_session(
                    session_id=sid, cwd=step.get("cwd", cwd), mcp_servers=[]
                )
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
                return await conn.prompt(
                    session_id=sid, prompt=blocks(step), **step.get("meta", {})
                )
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
    out({"type": "agent_stderr", "text": (await stderr).decode(errors="replace")})
    if isinstance(client, Editor):
        out({"type": "buffers", "buffers": client.buffers})
    out({"type": "done"})


if __name__ == "__main__":
    asyncio.run(run(json.load(sys.stdin)))
