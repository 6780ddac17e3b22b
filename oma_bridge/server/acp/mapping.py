"""How ACP and the daemon's agents translate into each other (``docs/acp.md``, "The facade").

* a ``session/prompt``'s content blocks become the agent's input: for an llm
  profile one user turn of ``ContentBlock``s (then the shape guard and copy);
  for process and acp profiles the string form, and any block but text is
  refused before anything is spawned;
* journal entries become ``session/update`` notifications (a ``run_start``
  only when a ``session/load`` replays the session);
* a run's result becomes the answer's ``stopReason``, or a JSON-RPC error;
* a ``session/prompt``'s ``_meta`` goes to an acp profile's agent as it is,
  but for the keys this daemon reserves (``oma-bridge/...``).
"""

from __future__ import annotations

from typing import Any

import orjson

from oma_bridge.backends import BackendKind, text_only
from oma_bridge.backends.acp.turn import NOTE_META
from oma_bridge.errors import RefusedError, WireError
from oma_bridge.redaction import redact
from oma_bridge.rpc.codes import INTERNAL_ERROR, INVALID_PARAMS
from oma_bridge.rpc.core import encode_notification
from oma_bridge.wire.params import RESERVED_META

__all__ = [
    "NOTE_META",
    "RESERVED_META",
    "UpdateFrames",
    "client_meta",
    "prompt_input",
    "stop_reason",
    "updates_of",
]

_REFUSED = {"name": "InvalidMessageError", "code": "INVALID_MESSAGE"}
REFUSED_CODE = RefusedError.code


def client_meta(raw: object) -> dict[str, Any] | None:
    """A client's request ``_meta`` for the agent: every key as sent but the reserved ones.

    ``None`` when there is nothing to pass on; ``WireError`` -32602 when
    ``_meta`` is not an object (ACP's schema says it is one).
    """
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise WireError(INVALID_PARAMS, "_meta must be an object")
    kept = {key: value for key, value in raw.items() if not key.startswith(RESERVED_META)}
    return kept or None


def _refuse(message: str) -> WireError:
    return WireError(INVALID_PARAMS, message, dict(_REFUSED))


def _text_of(block: dict[str, Any], index: int) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise _refuse(f"prompt[{index}] is a text block without a text string")
    return text


def prompt_input(blocks: object, kind: BackendKind, profile: str) -> str | list[dict[str, Any]]:
    """The agent input of a prompt; ``WireError`` -32602 naming the block that cannot go."""
    if not isinstance(blocks, list):
        raise _refuse("prompt must be an array of content blocks")
    if text_only(kind):
        texts = []
        for index, block in enumerate(blocks):
            block_type = block.get("type") if isinstance(block, dict) else None
            if block_type == "text":
                texts.append(_text_of(block, index))
            elif isinstance(block_type, str):
                article = "an" if block_type[:1] in "aeiou" else "a"
                raise _refuse(
                    f'prompt[{index}] is {article} {block_type} block; profile "{profile}" '
                    "carries text only"
                )
            else:
                raise _refuse(f"prompt[{index}] is not a content block (no type)")
        return "\n".join(texts)
    return [_llm_block(block, index) for index, block in enumerate(blocks)]


def _llm_block(block: object, index: int) -> dict[str, Any]:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise _refuse(f"prompt[{index}] is not a content block (no type)")
    kind = block["type"]
    if kind == "text":
        return {"type": "text", "text": _text_of(block, index)}
    if kind == "image":
        data, mime = block.get("data"), block.get("mimeType")
        if not isinstance(data, str) or not isinstance(mime, str):
            raise _refuse(f"prompt[{index}] is an image block without data and mimeType")
        return {"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}}
    if kind == "resource":
        resource = block.get("resource")
        uri = resource.get("uri") if isinstance(resource, dict) else None
        text = resource.get("text") if isinstance(resource, dict) else None
        if not isinstance(uri, str) or not isinstance(text, str):
            raise _refuse(
                f"prompt[{index}] is a resource block without a uri and a text "
                "(binary resources are not supported)"
            )
        return {"type": "text", "text": f'<resource uri="{uri}">\n{text}\n</resource>'}
    if kind == "resource_link":
        uri = block.get("uri")
        if not isinstance(uri, str):
            raise _refuse(f"prompt[{index}] is a resource_link block without a uri")
        return {"type": "text", "text": f"[resource: {uri}]"}
    if kind == "audio":
        raise _refuse(f"prompt[{index}] is an audio block; no profile takes audio")
    raise _refuse(f"prompt[{index}] is a block of an unknown type {kind!r}")


def _update(kind: str, **fields: Any) -> dict[str, Any]:
    return {"sessionUpdate": kind, **fields}


def _user_chunks(run_input: Any) -> list[dict[str, Any]]:
    """The user turn of a ``run_start``: its text and image blocks, as ACP content."""
    if isinstance(run_input, str):
        return [_update("user_message_chunk", content={"type": "text", "text": run_input})]
    blocks: list[Any] = []
    if isinstance(run_input, list):
        if run_input and isinstance(run_input[-1], dict) and "role" in run_input[-1]:
            blocks = list(run_input[-1].get("content") or [])  # an LLMMessage[] input
        else:
            blocks = run_input  # a ContentBlock[] turn
    chunks = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            chunks.append(
                _update("user_message_chunk", content={"type": "text", "text": block.get("text")})
            )
        elif block.get("type") == "image":
            source = block.get("source") or {}
            content = {
                "type": "image",
                "data": source.get("data"),
                "mimeType": source.get("media_type"),
            }
            chunks.append(_update("user_message_chunk", content=content))
    return chunks


def updates_of(entry: dict[str, Any], *, replay: bool) -> list[dict[str, Any]]:
    """The ``session/update``s (their ``update`` objects) of one journal entry."""
    kind = entry["type"]
    if kind == "run_start":
        return _user_chunks(entry.get("input")) if replay else []
    if kind == "update":
        return [entry["update"]]
    if kind == "note":
        # ACP has no note: the editor shows it as a message of the agent's, marked
        # as the daemon's own (docs/decisions.md, D21), live and on session/load.
        return [
            _update(
                "agent_message_chunk",
                content={"type": "text", "text": f"[oma-bridge] {entry['text']}\n\n"},
                _meta={NOTE_META: True},
            )
        ]
    if kind != "event":
        return []
    if "update" in entry:  # a chunk with more than its text: as the agent sent it
        return [entry["update"]]
    event = entry["event"]
    data = event.get("data")
    match event.get("type"):
        case "text":
            return [_update("agent_message_chunk", content={"type": "text", "text": data})]
        case "reasoning":
            return [_update("agent_thought_chunk", content={"type": "text", "text": data})]
        case "update":
            return [data] if isinstance(data, dict) else []
        case "tool_use" if isinstance(data, dict):
            return [
                _update(
                    "tool_call",
                    toolCallId=data.get("id"),
                    title=data.get("name"),
                    rawInput=data.get("input"),
                    status="in_progress",
                )
            ]
        case "tool_result" if isinstance(data, dict):
            content = data.get("content")
            text = content if isinstance(content, str) else _parts_text(content)
            return [
                _update(
                    "tool_call_update",
                    toolCallId=data.get("tool_use_id"),
                    status="failed" if data.get("is_error") else "completed",
                    content=[{"type": "content", "content": {"type": "text", "text": text}}],
                )
            ]
    return []


class UpdateFrames:
    """The ``session/update`` notifications of journal entries for one session, encoded.

    A plain text event, a stream's every chunk, is its text's JSON spliced
    between two byte strings made once: the very bytes
    :func:`~oma_bridge.rpc.core.encode_notification` gives for its update
    (orjson keeps the keys' order), without the three dicts of the update
    and its envelope made and encoded per chunk (docs/benchmarks.md, "ACP
    facade").  Every other entry goes through :func:`updates_of`.
    """

    __slots__ = ("_text_head", "_text_tail", "session_id")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        empty = self.encode(_update("agent_message_chunk", content={"type": "text", "text": ""}))
        at = empty.rindex(b'""')  # the text is the last value of the message
        self._text_head, self._text_tail = empty[:at], empty[at + 2 :]

    def encode(self, update: dict[str, Any]) -> bytes:
        """One update's notification in this session."""
        return encode_notification(
            "session/update", {"sessionId": self.session_id, "update": update}
        )

    def of(self, entry: dict[str, Any], *, replay: bool) -> list[bytes]:
        """The notifications of one journal entry (see :func:`updates_of`), in order."""
        if entry["type"] == "event" and "update" not in entry:
            event = entry["event"]
            text = event.get("data")
            if event.get("type") == "text" and isinstance(text, str):
                return [self._text_head + orjson.dumps(text) + self._text_tail]
        return [self.encode(update) for update in updates_of(entry, replay=replay)]


def _parts_text(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    return "".join(
        part.get("text", "")
        for part in parts
        if isinstance(part, dict) and part.get("type") == "text"
    )


def stop_reason(result: dict[str, Any]) -> dict[str, Any]:
    """The answer to ``session/prompt`` for a run's result, or raise its JSON-RPC error."""
    status = result.get("status") or {}
    code = status.get("code")
    if code == "ok":
        return {"stopReason": "end_turn"}
    if code == "cancelled":
        return {"stopReason": "cancelled"}
    if code == "budget_exhausted":
        return {"stopReason": "max_tokens"}
    if (result.get("errorInfo") or {}).get("code") == REFUSED_CODE:
        # An acp profile's agent refused the turn: a failed run on the daemon's
        # own protocol (docs/contract.md §7), a refusal in ACP terms.
        return {"stopReason": "refusal"}
    message = redact(str(status.get("message") or "the run failed"))
    data: dict[str, Any] = {"status": status}
    if result.get("errorInfo") is not None:
        data["errorInfo"] = result["errorInfo"]
    raise WireError(INTERNAL_ERROR, message, data)
