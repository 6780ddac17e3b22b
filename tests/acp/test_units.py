"""Small pieces of the ACP backend in isolation: reader, schema, permissions, turn, fs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from oma_bridge.backends.acp.fs import OUTSIDE_CWD, confine, read_text_file
from oma_bridge.backends.acp.schema import InitializeResponse, SessionResponse
from oma_bridge.backends.acp.stdio import (
    LineReader,
    LineTooLongError,
    MessageReader,
    TooManyBadLinesError,
)
from oma_bridge.backends.acp.terminal import _trim_to_limit
from oma_bridge.backends.acp.turn import Turn
from oma_bridge.backends.permissions import choose_option, parse_options, selected
from oma_bridge.errors import WireError
from oma_bridge.results import StreamEvent

pytestmark = pytest.mark.anyio


class _Chunks:
    """A ByteReceiveStream over fixed chunks."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        await anyio.lowlevel.checkpoint()
        if not self.chunks:
            raise anyio.EndOfStream
        return self.chunks.pop(0)


async def test_line_reader_splits_crlf_and_keeps_a_last_line() -> None:
    reader = LineReader(_Chunks(b'{"a":1}\r\n{"b"', b':2}\n\n{"c":3}'), 1024)  # type: ignore[arg-type]
    lines = [await reader.readline() for _ in range(5)]
    assert lines == [b'{"a":1}', b'{"b":2}', b"", b'{"c":3}', None]


async def test_line_reader_ceiling() -> None:
    reader = LineReader(_Chunks(b"x" * 600, b"x" * 600, b"\n"), 1024)  # type: ignore[arg-type]
    with pytest.raises(LineTooLongError):
        await reader.readline()


async def test_line_reader_is_cancel_safe() -> None:
    send, receive = anyio.create_memory_object_stream[bytes](10)

    class Stream:
        async def receive(self, max_bytes: int = 65536) -> bytes:
            return await receive.receive()

    reader = LineReader(Stream(), 1024)  # type: ignore[arg-type]
    await send.send(b'{"half":')
    with anyio.move_on_after(0.05):
        await reader.readline()
    await send.send(b"true}\n")
    assert await reader.readline() == b'{"half":true}'


async def test_message_reader_skips_bad_lines_until_too_many_in_a_row() -> None:
    lines = LineReader(_Chunks(b'noise\n42\n{"ok":1}\n' + b"bad\n" * 3), 1024)  # type: ignore[arg-type]
    reader = MessageReader(lines, max_bad_lines=3)
    assert await reader.receive() == {"ok": 1}
    with pytest.raises(TooManyBadLinesError):
        await reader.receive()
    assert reader.bad_lines == 5


def test_schema_is_lenient() -> None:
    init = InitializeResponse.model_validate(
        {
            "protocolVersion": 1,
            "agentCapabilities": {"loadSession": "yes?", "sessionCapabilities": {"resume": {}}},
            "authMethods": [{"id": "a"}, "junk", {"id": "b", "type": "env_var", "vars": []}],
            "vendor": {"kept": True},
        }
    )
    assert init.agent_capabilities.load_session is False
    assert init.agent_capabilities.session_capability("resume")
    assert init.auth_method_ids() == {"a", "b"}
    assert init.model_extra == {"vendor": {"kept": True}}
    session = SessionResponse.model_validate(
        {"sessionId": "s", "configOptions": [{"id": "m", "category": "model"}], "models": 3}
    )
    assert session.model_option_id() == "m" and session.models is None


def test_permission_choice_is_least_privilege_whatever_the_order() -> None:
    options = parse_options(
        [
            {"optionId": "1", "name": "a", "kind": "allow_always"},
            {"optionId": "2", "name": "b", "kind": "reject_always"},
            "junk",
            {"optionId": "3", "name": "c", "kind": "allow_once"},
            {"optionId": "4", "kind": "reject_once"},
        ]
    )
    assert choose_option(options, "allow") == "3"
    assert choose_option(options, "reject") == "4"
    assert choose_option(options[:1], "reject") is None
    assert selected(None) == {"outcome": {"outcome": "cancelled"}}


async def test_turn_maps_updates_and_tool_calls() -> None:
    events: list[StreamEvent] = []

    async def emit(event: StreamEvent) -> None:
        events.append(event)

    turn = Turn(1, emit, prompting=True)
    updates: list[dict[str, Any]] = [
        {"sessionUpdate": "tool_call", "toolCallId": "t", "title": "Read", "rawInput": {"p": 1}},
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "a"}},
        {"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "in_progress"},
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "t",
            "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "x"}}],
        },
        {"sessionUpdate": "tool_call_update", "toolCallId": "u", "status": "failed"},
        {"sessionUpdate": "usage_update", "used": 5, "size": 10},
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "b"}},
    ]
    for update in updates:
        await turn.on_update(update)
    await turn.flush()
    assert turn.output == "ab" and turn.last_used == 5
    first, second = turn.tool_calls
    assert (first.tool_name, first.input) == ("Read", {"p": 1})
    assert first.output == '[{"type":"content","content":{"type":"text","text":"x"}}]'
    assert (second.tool_name, second.input, second.output) == ("u", {}, "")
    assert [e.type for e in events] == [
        "update",
        "text",
        "update",
        "update",
        "update",
        "usage_update",
        "text",
    ]
    # A typed event (D15): the update without its discriminator, the update kept as sent.
    usage = events[5]
    assert usage.data == {"used": 5, "size": 10}
    assert usage.acp_update == updates[5]


def test_fs_confinement(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    assert confine(root, str(root / "a" / ".." / "b")) == root / "b"
    with pytest.raises(WireError) as info:
        confine(root, str(root / ".." / "x"))
    assert (info.value.rpc_code, info.value.message) == (-32002, OUTSIDE_CWD)
    with pytest.raises(WireError, match="absolute"):
        confine(root, "relative.txt")


async def test_fs_read_line_and_limit(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("1\n2\n3\n4\n")
    root = tmp_path.resolve()  # noqa: ASYNC240 - a test's own temporary folder
    answer = await read_text_file(root, {"path": str(root / "f.txt"), "line": 2, "limit": 2})
    assert answer == {"content": "2\n3\n"}


def test_terminal_truncation_at_character_boundaries() -> None:
    data = bytearray("aé€😀".encode())  # 1 + 2 + 3 + 4 bytes
    assert _trim_to_limit(data, 8) and data.decode() == "€😀"  # 7 bytes: never half an "é"
    data = bytearray("aé€😀".encode())
    assert _trim_to_limit(data, 6) and data.decode() == "😀"  # never half a "€"
    data = bytearray(b"abc")
    assert not _trim_to_limit(data, 3) and data == b"abc"


async def test_consecutive_chunks_are_joined_until_flushed() -> None:
    events: list[StreamEvent] = []

    async def emit(event: StreamEvent) -> None:
        events.append(event)

    turn = Turn(1, emit, prompting=True, coalesce=True)
    for text in ("a", "b", "c"):
        await turn.on_update(
            {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
        )
    assert events == []
    await turn.flush()
    await turn.flush()
    assert [(e.type, e.data) for e in events] == [("text", "abc")]
    assert turn.output == "abc"
