"""A real ACP agent on the official Python SDK's agent side, driven by the prompt.

The scenario is the first word of the prompt's last paragraph (the system
prompt, when sent, is an earlier paragraph).  Environment switches:
``ACP_TEST_AUTH=required|refuse`` (session/new needs ``authenticate`` with
method ``key``; ``refuse`` makes that fail too), ``ACP_TEST_CONFIG=1``
(offer a model config option), ``ACP_TEST_EARLY=1`` (send updates before
answering session/new), ``ACP_TEST_RESUME=1`` (advertise ``session/resume``),
``ACP_TEST_NO_LOAD=1`` (do not advertise ``session/load``),
``ACP_TEST_LOAD_FAILS=1`` (``session/load`` and ``session/resume`` fail).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import acp
from acp import RequestError, schema

PROC_TREE = str(Path(__file__).with_name("proc_tree.py"))


TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
#: What ``rich`` sends: chunks with more than their text (``messageId``, ``_meta`` with
#: W3C trace context, ``annotations``) and the session-state kinds.
RICH: list[dict[str, Any]] = json.loads(
    Path(__file__).with_name("acp_rich_updates.json").read_text()
)
#: What ``permmeta`` asks (but its ``sessionId``): a tool call and options with their own
#: ``_meta``, and the fields a client shows (``content``, ``locations``).
PERMISSION_WITH_META: dict[str, Any] = json.loads(
    Path(__file__).with_name("acp_permission_with_meta.json").read_text()
)


def _text_of(prompt: list[Any]) -> str:
    return "".join(getattr(block, "text", "") for block in prompt)


class ScenarioAgent:
    def __init__(self) -> None:
        self.conn: Any = None
        self.sessions: dict[str, dict[str, Any]] = {}
        self.authed = os.environ.get("ACP_TEST_AUTH") is None
        self.cancelled: dict[str, asyncio.Event] = {}
        self.counter = 0
        #: The last ``session/prompt``'s ``_meta`` (the SDK hands its keys over as kwargs).
        self.prompt_meta: dict[str, Any] = {}

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> schema.InitializeResponse:
        methods = []
        if os.environ.get("ACP_TEST_AUTH"):
            methods = [schema.AuthMethodAgent(id="key", name="API key")]
        capabilities = schema.AgentCapabilities(load_session=not os.environ.get("ACP_TEST_NO_LOAD"))
        if os.environ.get("ACP_TEST_RESUME"):
            capabilities.session_capabilities = schema.SessionCapabilities(
                resume=schema.SessionResumeCapabilities()
            )
        return schema.InitializeResponse(
            protocol_version=1,
            agent_capabilities=capabilities,
            auth_methods=methods,
            agent_info=schema.Implementation(name="scenario-agent", version="1.0"),
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> schema.AuthenticateResponse:
        if os.environ.get("ACP_TEST_AUTH") == "refuse":
            raise RequestError(-32000, "invalid API key for api_key=sk-secret123456")
        self.authed = True
        return schema.AuthenticateResponse()

    def _open(self, session_id: str, how: str, cwd: str = "") -> None:
        self.sessions[session_id] = {"how": how, "turns": 0, "model": None, "cwd": cwd}
        self.cancelled[session_id] = asyncio.Event()

    async def new_session(self, cwd: str, **kwargs: Any) -> schema.NewSessionResponse:
        if not self.authed:
            raise RequestError(-32000, "Authentication required: set token=abc123secret")
        self.counter += 1
        session_id = f"s{os.getpid()}-{self.counter}"
        self._open(session_id, "new", cwd)
        if os.environ.get("ACP_TEST_EARLY"):
            await self.conn.session_update(
                session_id,
                schema.AvailableCommandsUpdate(
                    session_update="available_commands_update",
                    available_commands=[schema.AvailableCommand(name="web", description="search")],
                ),
            )
        options = None
        if os.environ.get("ACP_TEST_CONFIG"):
            options = [
                schema.SessionConfigOptionSelect(
                    id="model-choice",
                    name="Model",
                    category="model",
                    type="select",
                    current_value="small",
                    options=[
                        schema.SessionConfigSelectOption(value="small", name="Small"),
                        schema.SessionConfigSelectOption(value="large", name="Large"),
                    ],
                )
            ]
        return schema.NewSessionResponse(session_id=session_id, config_options=options)

    async def load_session(self, cwd: str, session_id: str, **kwargs: Any) -> None:
        if os.environ.get("ACP_TEST_LOAD_FAILS"):
            raise RequestError(-32002, f"no session {session_id} here")
        self._open(session_id, "load", cwd)
        return None

    async def resume_session(
        self, session_id: str, cwd: str, **kwargs: Any
    ) -> schema.ResumeSessionResponse:
        if os.environ.get("ACP_TEST_LOAD_FAILS"):
            raise RequestError(-32002, f"no session {session_id} to resume")
        self._open(session_id, "resume", cwd)
        return schema.ResumeSessionResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: Any, **kwargs: Any
    ) -> schema.SetSessionConfigOptionResponse:
        self.sessions[session_id]["model"] = f"{config_id}={value}"
        return schema.SetSessionConfigOptionResponse(config_options=[])

    async def set_session_mode(
        self, session_id: str, mode_id: str, **kwargs: Any
    ) -> schema.SetSessionModeResponse:
        """Any mode but ``bad``; says so with a ``current_mode_update`` before answering."""
        if mode_id == "bad":
            raise RequestError.invalid_params({"modeId": "no such mode"})
        self.sessions[session_id]["mode"] = mode_id
        await self.conn.session_update(
            session_id,
            schema.CurrentModeUpdate(session_update="current_mode_update", current_mode_id=mode_id),
        )
        return schema.SetSessionModeResponse(field_meta={"scenario/mode": mode_id})

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled[session_id].set()

    async def _say(self, session_id: str, text: str) -> None:
        await self.conn.session_update(session_id, acp.update_agent_message_text(text))

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> Any:
        text = _text_of(prompt)
        session = self.sessions[session_id]
        session["turns"] += 1
        self.prompt_meta = kwargs
        self.cancelled[session_id] = asyncio.Event()
        last = text.split("\n\n")[-1]
        word, _, rest = last.partition(" ")
        handler = getattr(self, f"do_{word}", None)
        if handler is None:
            await self._say(session_id, text)
            return schema.PromptResponse(stop_reason="end_turn")
        return await handler(session_id, text, rest.strip())

    def _stop(self, reason: str) -> schema.PromptResponse:
        return schema.PromptResponse(stop_reason=reason)  # type: ignore[arg-type]

    async def do_echo(self, sid: str, text: str, rest: str) -> Any:
        await self._say(sid, text)
        await self.conn.session_update(
            sid,
            schema.UsageUpdate(session_update="usage_update", used=len(text) * 10, size=100000),
        )
        return self._stop("end_turn")

    async def do_meta(self, sid: str, text: str, rest: str) -> Any:
        """``meta``: the ``_meta`` this ``session/prompt`` came with, as JSON."""
        await self._say(sid, json.dumps(self.prompt_meta, sort_keys=True))
        return self._stop("end_turn")

    async def do_settings(self, sid: str, text: str, rest: str) -> Any:
        """``settings``: the session's mode and config option, as set by the client."""
        session = self.sessions[sid]
        mode, model = session.get("mode"), session["model"]
        await self._say(sid, f"mode={mode} model={model} pid={os.getpid()}")
        return self._stop("end_turn")

    async def do_whoami(self, sid: str, text: str, rest: str) -> Any:
        session = self.sessions[sid]
        how, turns, model = session["how"], session["turns"], session["model"]
        await self._say(sid, f"session={sid} how={how} turns={turns} model={model}")
        return self._stop("end_turn")

    async def do_where(self, sid: str, text: str, rest: str) -> Any:
        """``where``: the session's ``cwd`` and the agent process's own folder."""
        await self._say(sid, f"session={self.sessions[sid]['cwd']} process={Path.cwd()}")
        return self._stop("end_turn")

    async def do_edit(self, sid: str, text: str, rest: str) -> Any:
        """``edit NAME TEXT``: write NAME in the session's folder itself, as a coding agent does."""
        name, _, content = rest.partition(" ")
        (Path(self.sessions[sid]["cwd"]) / name).write_text(content)
        await self._say(sid, "edited")
        return self._stop("end_turn")

    async def do_chunks(self, sid: str, text: str, rest: str) -> Any:
        for i in range(int(rest or "10")):
            await self._say(sid, f"{i},")
        return self._stop("end_turn")

    async def do_thought(self, sid: str, text: str, rest: str) -> Any:
        await self.conn.session_update(sid, acp.update_agent_thought_text("thinking..."))
        await self.conn.session_update(
            sid, acp.update_plan([acp.plan_entry("step one", status="in_progress")])
        )
        await self._say(sid, "answer")
        return self._stop("end_turn")

    async def do_tools(self, sid: str, text: str, rest: str) -> Any:
        await self.conn.session_update(
            sid,
            acp.start_tool_call("t1", "Edit file", kind="edit", raw_input={"path": "/x"}),
        )
        answer = await self.conn.request_permission(
            session_id=sid,
            tool_call=schema.ToolCallUpdate(tool_call_id="t1", title="Edit file", kind="edit"),
            options=[
                schema.PermissionOption(option_id="aa", name="Always", kind="allow_always"),
                schema.PermissionOption(option_id="ao", name="Once", kind="allow_once"),
                schema.PermissionOption(option_id="ro", name="No", kind="reject_once"),
                schema.PermissionOption(option_id="ra", name="Never", kind="reject_always"),
            ],
            traceparent=TRACEPARENT,  # the request's _meta: W3C trace context
        )
        outcome = answer.outcome
        chosen = getattr(outcome, "option_id", None) or outcome.outcome
        await self.conn.session_update(
            sid, acp.update_tool_call("t1", status="completed", raw_output="edited")
        )
        await self._say(sid, f"permission:{chosen}")
        return self._stop("end_turn")

    async def do_permmeta(self, sid: str, text: str, rest: str) -> Any:
        """``permmeta``: :data:`PERMISSION_WITH_META` asked as written (raw JSON)."""
        answer = await self.conn._conn.send_request(  # noqa: SLF001 — the SDK's raw connection sends JSON its typed API cannot
            "session/request_permission", {"sessionId": sid, **PERMISSION_WITH_META}
        )
        outcome = answer["outcome"]
        await self._say(sid, f"permission:{outcome.get('optionId') or outcome['outcome']}")
        return self._stop("end_turn")

    async def do_elicit(self, sid: str, text: str, rest: str) -> Any:
        """``elicit [url]``: ask the user (a form with one ``name`` field, or a URL)."""
        mode: Any
        if rest == "url":
            mode = schema.ElicitationUrlSessionMode(
                session_id=sid, elicitation_id="e1", url="https://example.com/login"
            )
        else:
            mode = schema.ElicitationFormSessionMode(
                session_id=sid,
                tool_call_id="t9",
                requested_schema=schema.ElicitationSchema(
                    properties={"name": {"type": "string"}}, required=["name"]
                ),
            )
        answer = await self.conn.create_elicitation(message="Your name?", mode=mode)
        content = json.dumps(getattr(answer, "content", None), sort_keys=True)
        await self._say(sid, f"elicitation:{answer.action}:{content}")
        return self._stop("end_turn")

    async def do_elicitdone(self, sid: str, text: str, rest: str) -> Any:
        """``elicitdone [bare]``: a URL-mode elicitation ``e1``; once answered,
        ``elicitation/complete`` for it (``bare``: only a completion, of ``e2``, never asked)."""
        if rest == "bare":
            await self.conn.complete_elicitation(elicitation_id="e2")
            await self._say(sid, "elicitation:none:completed")
            return self._stop("end_turn")
        mode = schema.ElicitationUrlSessionMode(
            session_id=sid, elicitation_id="e1", url="https://example.com/login"
        )
        answer = await self.conn.create_elicitation(message="Log in", mode=mode)
        await self.conn.complete_elicitation(elicitation_id="e1", traceparent=TRACEPARENT)
        await self._say(sid, f"elicitation:{answer.action}:completed")
        return self._stop("end_turn")

    async def do_rich(self, sid: str, text: str, rest: str) -> Any:
        """``rich``: the updates of :data:`RICH`, as written (raw JSON, not the SDK models)."""
        for update in RICH:
            await self.conn._conn.send_notification(  # noqa: SLF001 — the SDK's raw connection sends JSON its typed API cannot
                "session/update", {"sessionId": sid, "update": update}
            )
        return self._stop("end_turn")

    async def do_slow(self, sid: str, text: str, rest: str) -> Any:
        await self._say(sid, "started")
        await self.cancelled[sid].wait()
        await self._say(sid, " stopping")
        return self._stop("cancelled")

    async def do_stubborn(self, sid: str, text: str, rest: str) -> Any:
        await self._say(sid, "never stopping")
        await asyncio.sleep(3600)
        return self._stop("end_turn")

    async def do_hang(self, sid: str, text: str, rest: str) -> Any:
        await self._say(sid, "asking")
        answer = await self.conn.request_permission(
            session_id=sid,
            tool_call=schema.ToolCallUpdate(tool_call_id="h1", title="Run rm"),
            options=[schema.PermissionOption(option_id="ok", name="OK", kind="allow_once")],
        )
        sys.stderr.write(f"hang outcome: {answer.outcome.outcome}\n")
        return self._stop("cancelled")

    async def do_big(self, sid: str, text: str, rest: str) -> Any:
        await self._say(sid, "x" * (2 * 1024 * 1024))
        return self._stop("end_turn")

    async def do_stderr(self, sid: str, text: str, rest: str) -> Any:
        line = "e" * 1023 + "\n"
        for _ in range(1024):
            os.write(2, line.encode())  # synchronous, as Python/Rust/Go agents write
        await self._say(sid, "survived")
        return self._stop("end_turn")

    async def do_refuse(self, sid: str, text: str, rest: str) -> Any:
        if rest:
            await self._say(sid, rest)
        return self._stop("refusal")

    async def do_maxtokens(self, sid: str, text: str, rest: str) -> Any:
        await self._say(sid, "partial")
        return self._stop("max_tokens")

    async def do_crash(self, sid: str, text: str, rest: str) -> Any:
        await self._say(sid, "about to crash")
        await asyncio.sleep(0.05)
        os.write(2, b"fatal: boom with password=hunter2\n")
        os._exit(3)

    async def do_leak(self, sid: str, text: str, rest: str) -> Any:
        """Print the values of the variables ``rest`` names on stdout (not JSON) and
        stderr, as a careless agent does, then die."""
        await self._say(sid, "leaking")
        await asyncio.sleep(0.1)  # the frame above is out: the line below is one of its own
        for name in rest.split():
            os.write(1, f"{os.environ[name]}\n".encode())
            os.write(2, f"debug: using {os.environ[name]}\n".encode())
        await asyncio.sleep(0.2)  # let the daemon read both before the pipes close
        os._exit(3)

    async def do_error(self, sid: str, text: str, rest: str) -> Any:
        raise RequestError.internal_error({"why": "scripted"})

    async def do_auth(self, sid: str, text: str, rest: str) -> Any:
        raise RequestError(-32000, "please log in")

    async def do_fs(self, sid: str, text: str, rest: str) -> Any:
        try:
            answer = await self.conn.read_text_file(session_id=sid, path=rest)
            await self._say(sid, f"read:{answer.content}")
        except RequestError as exc:
            await self._say(sid, f"error:{exc.code}:{exc}")
        return self._stop("end_turn")

    async def do_fswrite(self, sid: str, text: str, rest: str) -> Any:
        path, _, content = rest.partition(" ")
        try:
            await self.conn.write_text_file(session_id=sid, path=path, content=content)
            await self._say(sid, "written")
        except RequestError as exc:
            await self._say(sid, f"error:{exc.code}:{exc}")
        return self._stop("end_turn")

    async def do_terminal(self, sid: str, text: str, rest: str) -> Any:
        code = (
            "import sys; sys.stdout.write('ab' + 'é' * 3); sys.stdout.flush();"
            " sys.stderr.write('!'); sys.exit(4)"
        )
        created = await self.conn.create_terminal(
            session_id=sid, command=sys.executable, args=["-c", code], output_byte_limit=int(rest)
        )
        tid = created.terminal_id
        exited = await self.conn.wait_for_terminal_exit(session_id=sid, terminal_id=tid)
        output = await self.conn.terminal_output(session_id=sid, terminal_id=tid)
        await self.conn.release_terminal(session_id=sid, terminal_id=tid)
        await self._say(
            sid, f"exit={exited.exit_code} output={output.output} truncated={output.truncated}"
        )
        return self._stop("end_turn")

    async def do_terminalkill(self, sid: str, text: str, rest: str) -> Any:
        created = await self.conn.create_terminal(
            session_id=sid, command=sys.executable, args=["-c", "import time; time.sleep(600)"]
        )
        tid = created.terminal_id
        await self.conn.kill_terminal(session_id=sid, terminal_id=tid)
        exited = await self.conn.wait_for_terminal_exit(session_id=sid, terminal_id=tid)
        await self.conn.release_terminal(session_id=sid, terminal_id=tid)
        await self._say(sid, f"signal={exited.signal}")
        return self._stop("end_turn")

    async def do_terminalrun(self, sid: str, text: str, rest: str) -> Any:
        """``terminalrun <python code>``: run it, say how it ended and what it wrote."""
        created = await self.conn.create_terminal(
            session_id=sid, command=sys.executable, args=["-c", rest]
        )
        tid = created.terminal_id
        exited = await self.conn.wait_for_terminal_exit(session_id=sid, terminal_id=tid)
        output = await self.conn.terminal_output(session_id=sid, terminal_id=tid)
        await self.conn.release_terminal(session_id=sid, terminal_id=tid)
        await self._say(
            sid, f"exit={exited.exit_code} signal={exited.signal} output={output.output}"
        )
        return self._stop("end_turn")

    async def do_terminalenv(self, sid: str, text: str, rest: str) -> Any:
        """``terminalenv``: the environment ``env`` sees in a terminal (one variable added)."""
        extra = schema.EnvVariable(name="OMAB_FROM_REQUEST", value="laid-over")
        created = await self.conn.create_terminal(session_id=sid, command="env", env=[extra])
        tid = created.terminal_id
        await self.conn.wait_for_terminal_exit(session_id=sid, terminal_id=tid)
        output = await self.conn.terminal_output(session_id=sid, terminal_id=tid)
        await self.conn.release_terminal(session_id=sid, terminal_id=tid)
        await self._say(sid, output.output)
        return self._stop("end_turn")

    async def do_terminaltree(self, sid: str, text: str, rest: str) -> Any:
        """``terminaltree kill|hang [proc_tree.py flags]``: a command with a grandchild.

        Says the ``child <pid>`` / ``grandchild <pid>`` lines once both run;
        then ``kill`` kills the terminal and says its signal, ``hang`` waits
        for a cancel (or for whatever ends the agent).
        """
        mode, *flags = rest.split()
        created = await self.conn.create_terminal(
            session_id=sid, command=sys.executable, args=[PROC_TREE, *flags]
        )
        tid = created.terminal_id
        output = ""
        while "\nchild " not in "\n" + output:
            await asyncio.sleep(0.05)
            output = (await self.conn.terminal_output(session_id=sid, terminal_id=tid)).output
        await self._say(sid, output)
        if mode == "kill":
            await self.conn.kill_terminal(session_id=sid, terminal_id=tid)
            exited = await self.conn.wait_for_terminal_exit(session_id=sid, terminal_id=tid)
            await self.conn.release_terminal(session_id=sid, terminal_id=tid)
            await self._say(sid, f"signal={exited.signal}")
            return self._stop("end_turn")
        await self.cancelled[sid].wait()
        return self._stop("cancelled")

    async def do_terminalgone(self, sid: str, text: str, rest: str) -> Any:
        """``terminalgone``: a terminal, its output, then two calls that may fail (each said)."""
        created = await self.conn.create_terminal(
            session_id=sid, command=sys.executable, args=["-c", "print('hi')"]
        )
        tid = created.terminal_id
        output = await self.conn.terminal_output(session_id=sid, terminal_id=tid)
        await self._say(sid, f"output={output.output}")
        for call in (self.conn.wait_for_terminal_exit, self.conn.terminal_output):
            try:
                await call(session_id=sid, terminal_id=tid)
                await self._say(sid, " ok")
            except RequestError as exc:
                await self._say(sid, f" error:{exc.code}:{exc}")
        return self._stop("end_turn")

    async def do_terminalhang(self, sid: str, text: str, rest: str) -> Any:
        created = await self.conn.create_terminal(
            session_id=sid,
            command=sys.executable,
            args=["-c", "import os, time; print(os.getpid(), flush=True); time.sleep(600)"],
        )
        await asyncio.sleep(0.3)
        output = await self.conn.terminal_output(session_id=sid, terminal_id=created.terminal_id)
        await self._say(sid, f"pid={output.output.strip()}")
        await self.cancelled[sid].wait()
        return self._stop("cancelled")


if __name__ == "__main__":
    # session/resume is "unstable" in this SDK release (stable in schema 1.25.0).
    unstable = bool(os.environ.get("ACP_TEST_RESUME"))
    asyncio.run(acp.run_agent(ScenarioAgent(), use_unstable_protocol=unstable))  # type: ignore[arg-type]
