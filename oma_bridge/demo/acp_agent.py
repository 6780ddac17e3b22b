"""A small, real, offline ACP v1 agent: ``python -m oma_bridge.demo.acp_agent``.

It speaks the Agent Client Protocol over stdin/stdout (one JSON-RPC message
per line) on the project's own JSON-RPC core (:class:`oma_bridge.rpc.Peer`),
so it needs no ACP SDK, no network and no key.  It is the embedded default
config's ``demo`` agent and a readable example of the agent side of ACP.

What it does:

* ``initialize``: protocol version 1, ``agentInfo``, no authentication.
* ``session/new``: a fresh session (``demo-1``, ``demo-2``, ...).
* ``session/prompt``: a deterministic reply streamed as several
  ``agent_message_chunk`` updates — the prompt echoed, its words and
  characters counted, and the turn number with the session's running word
  count (so a client can see that a session carries over) — then a
  ``usage_update`` and ``stopReason: "end_turn"``.
* ``/tool <text>``: announces a ``tool_call`` (count the words of ``<text>``),
  asks ``session/request_permission``, runs it only if allowed, and reports
  with ``tool_call_update``.  "Always allow" is remembered for the session.
* ``/wait <seconds>``: waits (at most 60 s) so that ``session/cancel`` can
  be tried; the turn then ends with ``stopReason: "cancelled"``.
* ``session/cancel``: ends the running turn with ``"cancelled"``.
* End of stdin: the agent exits.

Anything else on stdout would corrupt the protocol, so stray ``print`` calls
go to stderr (see :func:`_protocol_stdout`).
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
import anyio.lowlevel
import anyio.to_thread

from oma_bridge._version import __version__
from oma_bridge.errors import WireError
from oma_bridge.rpc import Peer
from oma_bridge.rpc.codes import (
    ACP_PROTOCOL_VERSION,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
)

__all__ = ["AGENT_NAME", "DemoAgent", "main", "reply_chunks", "serve_stdio"]

logger = logging.getLogger("oma_bridge.demo")

AGENT_NAME = "oma-bridge-demo"
#: The context size reported in ``usage_update`` (the demo counts words as tokens).
CONTEXT_SIZE = 100_000
MAX_WAIT_S = 60.0

_TOOL_OPTIONS = [
    {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
]


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def prompt_text(blocks: Any) -> str:
    """The prompt's text: text blocks as they are, other blocks as ``[<type>]``."""
    if not isinstance(blocks, list):
        raise WireError(INVALID_PARAMS, "prompt must be an array of content blocks")
    parts: list[str] = []
    for block in blocks:
        if not isinstance(block, dict):
            raise WireError(INVALID_PARAMS, "a content block must be an object")
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        else:
            parts.append(f"[{block.get('type')}]")
    return "".join(parts)


def reply_chunks(text: str, turn: int, session_id: str, words_so_far: int) -> list[str]:
    """The reply to an ordinary prompt, in the chunks it is streamed in."""
    words = len(text.split())
    return [
        f"You said: {text}\n",
        f"That is {_plural(words, 'word')} and {_plural(len(text), 'character')}.\n",
        f"This is turn {turn} of session {session_id} ({_plural(words_so_far, 'word')} so far).",
    ]


@dataclass
class Session:
    """One conversation: its turn count, word count, and the running turn's cancel."""

    session_id: str
    cwd: str
    turns: int = 0
    words: int = 0
    always_allow: bool = False
    cancel: anyio.Event | None = None

    @property
    def busy(self) -> bool:
        return self.cancel is not None


@dataclass
class DemoAgent:
    """The agent's state and its handlers; :func:`serve_stdio` wires it to a :class:`Peer`."""

    peer: Peer | None = None
    sessions: dict[str, Session] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _tool_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    # -- dispatch -----------------------------------------------------------------

    async def on_request(self, method: str, params: Any) -> Any:
        params = params if isinstance(params, dict) else {}
        if method == "initialize":
            return self.initialize(params)
        if method == "session/new":
            return self.new_session(params)
        if method == "session/prompt":
            return await self.prompt(params)
        raise WireError(METHOD_NOT_FOUND, f"Method not found: {method}")

    async def on_notification(self, method: str, params: Any) -> None:
        if method == "session/cancel" and isinstance(params, dict):
            session = self.sessions.get(str(params.get("sessionId")))
            if session is not None and session.cancel is not None:
                session.cancel.set()

    # -- methods ------------------------------------------------------------------

    def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        # A client asking for another version gets ours (1); it decides whether to go on.
        return {
            "protocolVersion": ACP_PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": False,
                "promptCapabilities": {"image": False, "audio": False, "embeddedContext": False},
            },
            "authMethods": [],
            "agentInfo": {
                "name": AGENT_NAME,
                "title": "oma-bridge demo agent",
                "version": __version__,
            },
        }

    def new_session(self, params: dict[str, Any]) -> dict[str, Any]:
        cwd = params.get("cwd")
        if not isinstance(cwd, str) or not Path(cwd).is_absolute():
            raise WireError(INVALID_PARAMS, "cwd must be an absolute path")
        session_id = f"demo-{next(self._ids)}"
        self.sessions[session_id] = Session(session_id, cwd)
        return {"sessionId": session_id}

    async def prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self.sessions.get(str(params.get("sessionId")))
        if session is None:
            raise WireError(INVALID_PARAMS, f"unknown session {params.get('sessionId')!r}")
        text = prompt_text(params.get("prompt"))
        if session.busy:
            raise WireError(INVALID_REQUEST, f"session {session.session_id} is already prompting")
        session.cancel = cancel = anyio.Event()
        session.turns += 1
        session.words += len(text.split())
        try:
            command, _, rest = text.strip().partition(" ")
            if command == "/tool":
                stop = await self._tool_turn(session, rest.strip(), cancel)
            elif command == "/wait":
                stop = await self._wait_turn(session, rest.strip(), cancel)
            else:
                chunks = reply_chunks(text, session.turns, session.session_id, session.words)
                stop = await self._say(session, chunks, cancel)
            await self._update(
                session,
                {"sessionUpdate": "usage_update", "used": session.words, "size": CONTEXT_SIZE},
            )
            return {"stopReason": stop}
        finally:
            session.cancel = None

    # -- turns ----------------------------------------------------------------------

    async def _say(self, session: Session, chunks: list[str], cancel: anyio.Event) -> str:
        """Stream ``chunks``; a cancel between two of them ends the turn."""
        for chunk in chunks:
            if cancel.is_set():
                return "cancelled"
            session.words += len(chunk.split())
            text = {"type": "text", "text": chunk}
            await self._update(session, {"sessionUpdate": "agent_message_chunk", "content": text})
            # Let a session/cancel that arrived meanwhile be read before the next chunk.
            await anyio.lowlevel.checkpoint()
        return "cancelled" if cancel.is_set() else "end_turn"

    async def _wait_turn(self, session: Session, rest: str, cancel: anyio.Event) -> str:
        try:
            seconds = min(max(float(rest or "1"), 0.0), MAX_WAIT_S)
        except ValueError:
            return await self._say(session, ["Usage: /wait <seconds>"], cancel)
        stop = await self._say(session, [f"Waiting {seconds:g} s (cancel me)..."], cancel)
        if stop == "cancelled":
            return stop
        with anyio.move_on_after(seconds):
            await cancel.wait()
        if cancel.is_set():
            await self._say(session, [" cancelled."], anyio.Event())  # said even though cancelled
            return "cancelled"
        return await self._say(session, [" done."], cancel)

    async def _tool_turn(self, session: Session, rest: str, cancel: anyio.Event) -> str:
        call_id = f"tool-{next(self._tool_ids)}"
        title = "Count the words of a text"
        raw_input = {"text": rest}
        await self._update(
            session,
            {
                "sessionUpdate": "tool_call",
                "toolCallId": call_id,
                "title": title,
                "kind": "think",
                "status": "pending",
                "rawInput": raw_input,
            },
        )
        choice = "allow-always" if session.always_allow else await self._ask(session, call_id)
        if choice is None or cancel.is_set():
            await self._tool_update(session, call_id, "failed", "cancelled")
            return "cancelled"
        if not choice.startswith("allow"):
            await self._tool_update(session, call_id, "failed", "permission refused")
            return await self._say(session, ["Permission refused: the tool did not run."], cancel)
        session.always_allow = session.always_allow or choice == "allow-always"
        await self._tool_update(session, call_id, "in_progress", None)
        words = len(rest.split())
        await self._tool_update(session, call_id, "completed", {"words": words})
        return await self._say(session, [f"The tool counted {_plural(words, 'word')}."], cancel)

    async def _ask(self, session: Session, call_id: str) -> str | None:
        """The chosen option id, or ``None`` when the client cancelled the request."""
        assert self.peer is not None
        try:
            answer = await self.peer.request(
                "session/request_permission",
                {
                    "sessionId": session.session_id,
                    "toolCall": {"toolCallId": call_id, "title": "Count the words of a text"},
                    "options": _TOOL_OPTIONS,
                },
            )
        except WireError as error:
            logger.warning("permission request failed: %s", error.message)
            return None
        outcome = answer.get("outcome") if isinstance(answer, dict) else None
        if isinstance(outcome, dict) and outcome.get("outcome") == "selected":
            option = outcome.get("optionId")
            known = {option["optionId"] for option in _TOOL_OPTIONS}
            return option if isinstance(option, str) and option in known else "reject-once"
        return None

    async def _tool_update(self, session: Session, call_id: str, status: str, output: Any) -> None:
        update: dict[str, Any] = {
            "sessionUpdate": "tool_call_update",
            "toolCallId": call_id,
            "status": status,
        }
        if output is not None:
            update["rawOutput"] = output
        await self._update(session, update)

    async def _update(self, session: Session, update: dict[str, Any]) -> None:
        assert self.peer is not None
        params = {"sessionId": session.session_id, "update": update}
        await self.peer.notify("session/update", params)


# ---------------------------------------------------------------------- stdio


def _protocol_stdout() -> IO[bytes]:
    """A private handle on the real stdout, with fd 1 pointed at stderr.

    Only protocol messages may reach stdout; a stray ``print`` (ours or a
    library's) then lands in stderr, where the client keeps a log tail.
    """
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


async def serve_stdio(stdin: IO[bytes] | None = None, stdout: IO[bytes] | None = None) -> None:
    """Serve one client over ``stdin``/``stdout`` (binary) until stdin ends."""
    reader = stdin if stdin is not None else sys.stdin.buffer
    writer = stdout if stdout is not None else _protocol_stdout()

    async def receive() -> bytes | None:
        while True:
            # A thread, because anyio has no portable async stdin; abandoning it
            # on cancel is safe: the process is ending then.
            line: bytes = await anyio.to_thread.run_sync(reader.readline, abandon_on_cancel=True)
            if not line:
                return None
            if line.strip():
                return line

    async def send(data: bytes) -> None:
        writer.write(data + b"\n")
        writer.flush()

    agent = DemoAgent()
    peer = Peer(send, receive, on_request=agent.on_request, on_notification=agent.on_notification)
    agent.peer = peer
    async with peer:
        await peer.closed.wait()


def main() -> int:
    """Run the agent on this process's stdio; returns the exit status."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="demo-agent: %(message)s")
    try:
        anyio.run(serve_stdio)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0  # the client went away mid-answer: nothing left to tell it
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
