"""One prompt turn: maps ``session/update`` notifications to stream events and results.

The mapping follows the reference (open-multi-agent's mapping of ACP updates) and adds what a
stream consumer needs:

* ``agent_message_chunk`` text -> one ``text`` event per chunk (OMA's
  behaviour), appended to ``output``.  With ``coalesce`` (the config's
  ``coalesce_text``) the texts of consecutive chunks that arrive in one read
  are joined into one event (:meth:`Turn.flush`), as the LLM layer joins
  the deltas of a read: every event crosses the agent's relay (and, in the
  daemon, a WebSocket frame), which costs far more than parsing a chunk.  A
  live agent whose chunks come a read apiece still gives one event per
  chunk; joined, the events always equal ``output`` (docs/contract.md §11.26);
* ``agent_thought_chunk`` text -> ``reasoning`` events;
* ``tool_call`` / ``tool_call_update`` -> :class:`ToolCallRecord` when a
  call completes or fails (and the raw update as an ``update`` event);
* ``usage_update`` -> the latest ``used``, telescoped into input tokens;
* a chunk marked ``_meta["oma-bridge/note"]`` (:data:`NOTE_META`) is another
  oma-bridge's journal note (a remote daemon that could not continue its
  own agent's session, PROTOCOL §13.4), not the agent's words: relayed as
  an ``update`` event as it came, never part of ``output``;
* ``plan``, ``usage_update``, ``available_commands_update`` and
  ``current_mode_update`` -> a stream event of that type (docs/decisions.md
  D15) whose ``data`` is the update without its ``sessionUpdate``;
* every other kind (config options, session info, notices, kinds this
  client does not know) -> an ``update`` event carrying the raw update dict,
  so nothing is dropped.

Every event made from an update that cannot be rebuilt from the event alone
carries it as ``acp_update`` (the typed kinds; a chunk with a ``messageId``,
``_meta`` or ``annotations``), so a relay can pass it on as it was sent.
Such a chunk is never joined with others (``coalesce``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from oma_bridge.backends import Emit
from oma_bridge.results import ACP_TYPED_UPDATES, StreamEvent, ToolCallRecord

__all__ = ["NOTE_META", "Turn", "event_of_update", "update_of_event"]

#: The ``_meta`` key that marks a chunk as a journal note of the daemon, not the agent's text.
NOTE_META = "oma-bridge/note"

_TERMINAL_STATUSES = ("completed", "failed")
_TURN_KINDS = frozenset(
    {
        "agent_message_chunk",
        "agent_thought_chunk",
        "user_message_chunk",
        "tool_call",
        "tool_call_update",
        "usage_update",
    }
)


@dataclass
class _Call:
    started: float
    title: str | None
    raw_input: Any


def event_of_update(update: dict[str, Any]) -> StreamEvent:
    """The stream event of a session-state update: typed for the kinds of D15, else ``update``."""
    kind = update.get("sessionUpdate")
    if kind in ACP_TYPED_UPDATES:
        data = {key: value for key, value in update.items() if key != "sessionUpdate"}
        return StreamEvent(kind, data, acp_update=update)
    return StreamEvent("update", update)


def update_of_event(event: StreamEvent) -> dict[str, Any] | None:
    """The ACP update an event stands for, as the agent sent it (``None``: none)."""
    if event.acp_update is not None:
        return event.acp_update
    return event.data if event.type == "update" and isinstance(event.data, dict) else None


def _plain_chunk(update: dict[str, Any]) -> bool:
    """Whether a text chunk is all its ``text`` event says (nothing to relay besides)."""
    content = update["content"]
    return len(update) == 2 and len(content) == 2


def _plain_message_text(update: dict[str, Any]) -> str | None:
    """The text of an ``agent_message_chunk`` that is all its ``text`` event says, else ``None``."""
    if len(update) != 2 or update.get("sessionUpdate") != "agent_message_chunk":
        return None
    text = _content_text(update)
    return text if text is not None and _plain_chunk(update) else None


def _is_note(update: dict[str, Any]) -> bool:
    meta = update.get("_meta")
    return isinstance(meta, dict) and meta.get(NOTE_META) is True


def _content_text(update: dict[str, Any]) -> str | None:
    content = update.get("content")
    if isinstance(content, dict) and content.get("type") == "text":
        text = content.get("text")
        if isinstance(text, str):
            return text
    return None


def _tool_output(update: dict[str, Any]) -> str:
    raw_output = update.get("rawOutput")
    if isinstance(raw_output, str):
        return raw_output
    if raw_output is not None:
        return orjson.dumps(raw_output).decode()
    content = update.get("content")
    if content:
        return orjson.dumps(content).decode()
    return ""


@dataclass
class Turn:
    """The updates of one ``session/prompt`` turn, fed in wire order (the rest of the
    turn's state is its :class:`~oma_bridge.backends.acp.turn_state.TurnState`)."""

    number: int
    emit: Emit
    #: Join the chunk texts of one read into one ``text`` event.
    coalesce: bool = False
    #: ``False`` until the prompt is sent: updates before it (a ``session/load``
    #: replay, commands announced after ``session/new``) are forwarded raw only.
    prompting: bool = False
    output_parts: list[str] = field(default_factory=list)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    last_used: int | None = None
    #: The first error the stream consumer raised; the turn's events stop there.
    emit_error: Exception | None = None
    _calls: dict[str, _Call] = field(default_factory=dict)
    #: Chunk texts read but not yet emitted (see :meth:`flush`).
    _pending: list[str] = field(default_factory=list)

    @property
    def output(self) -> str:
        return "".join(self.output_parts)

    async def on_update(self, update: dict[str, Any]) -> None:
        """Map one update; an error of the consumer is kept, never raised to the reader."""
        if self.emit_error is not None:
            return
        try:
            # A plain text chunk of the prompt, a stream's every update, here
            # without a coroutine more; every other update in _on_update.
            if (
                self.prompting
                and not self.coalesce
                and (text := _plain_message_text(update)) is not None
            ):
                self.output_parts.append(text)
                if self._pending:
                    await self.flush()
                await self.emit(StreamEvent("text", text))
            else:
                await self._on_update(update)
        except Exception as exc:
            self.emit_error = exc

    async def flush(self) -> None:
        """Emit the chunk texts held back as one ``text`` event.

        The connection calls it before it waits for more input and before
        anything but a ``session/update`` is handled, so no text waits on the
        agent, and every text is out before the turn's answer is.
        """
        if not self._pending:
            return
        text = "".join(self._pending)
        self._pending.clear()
        if self.emit_error is not None:
            return
        try:
            await self.emit(StreamEvent("text", text))
        except Exception as exc:
            self.emit_error = exc

    async def _on_update(self, update: dict[str, Any]) -> None:
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":  # first: a stream's every update is one
            if _is_note(update):
                await self.flush()
                await self.emit(StreamEvent("update", update))
                return
            text = _content_text(update) if self.prompting else None
            if text is not None:
                self.output_parts.append(text)
                plain = _plain_chunk(update)
                if self.coalesce and plain:
                    self._pending.append(text)
                else:
                    if self._pending:
                        await self.flush()
                    await self.emit(StreamEvent("text", text, None if plain else update))
                return
        if not self.prompting:
            # Before the prompt is sent, message and tool updates are a
            # session/load replay or late ones of an earlier turn: not this
            # turn's.  Session state (commands, modes, info) goes through.
            if kind not in _TURN_KINDS:
                await self.emit(event_of_update(update))
            return
        await self.flush()  # every other event keeps its place after the text before it
        if kind == "agent_thought_chunk":
            text = _content_text(update)
            if text is not None:
                plain = _plain_chunk(update)
                await self.emit(StreamEvent("reasoning", text, None if plain else update))
                return
        elif kind == "usage_update":
            used = update.get("used")
            if isinstance(used, int) and not isinstance(used, bool):
                self.last_used = used
        elif kind == "tool_call":
            self._start_call(update)
        elif kind == "tool_call_update":
            self._update_call(update)
        await self.emit(event_of_update(update))

    def _start_call(self, update: dict[str, Any]) -> None:
        call_id = update.get("toolCallId")
        if isinstance(call_id, str):
            title = update.get("title")
            self._calls[call_id] = _Call(
                time.monotonic(), title if isinstance(title, str) else None, update.get("rawInput")
            )
            if update.get("status") in _TERMINAL_STATUSES:
                self._update_call(update)

    def _update_call(self, update: dict[str, Any]) -> None:
        call_id = update.get("toolCallId")
        if not isinstance(call_id, str) or update.get("status") not in _TERMINAL_STATUSES:
            return
        known = self._calls.pop(call_id, None)
        title = update.get("title")
        name = title if isinstance(title, str) else (known.title if known else None) or call_id
        raw_input = update.get("rawInput")
        if raw_input is None:
            raw_input = known.raw_input if known and known.raw_input is not None else {}
        started = known.started if known else time.monotonic()
        self.tool_calls.append(
            ToolCallRecord(
                tool_name=name,
                input=raw_input,
                output=_tool_output(update),
                duration=int((time.monotonic() - started) * 1000),
            )
        )
