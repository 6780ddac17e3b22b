"""Text joined under back-pressure (PROTOCOL §13.1, docs/decisions.md D19), on a real socket.

A caller that keeps up gets one ``run/event`` per event; one whose socket is
backed up gets the text that came meanwhile joined into fewer, larger
entries, and every reader sees the same entries: the caller's frames, a
watcher's catch-up and the journal agree entry for entry, seqs stay
strictly increasing, and the joined texts still equal the output.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from support.wire import Wire, wire_client

from oma_bridge.server.agents.journal import JOIN_MAX_BYTES, Journal

from .conftest import daemon, service_of, small_send_buffer

pytestmark = pytest.mark.anyio

ECHO = """
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"
"""
WORDS = 20_000
#: Every entry of the stream stays for the watcher's catch-up, joined or not.
BIG_JOURNAL = "journal_max_events = 50000"
TEXT = " ".join(f"w{n}" for n in range(WORDS))


class HeldBack:
    """A reader's gate: once armed, the next frame waits ``seconds`` (the socket backs up)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.armed = False

    async def gate(self) -> None:
        if self.armed:
            self.armed = False
            await anyio.sleep(self.seconds)


def text_frames(wire: Wire, run_id: str) -> list[tuple[int, str]]:
    return [
        (note["seq"], note["event"]["data"])
        for note in wire.events("run/event")
        if note["runId"] == run_id and note["event"]["type"] == "text"
    ]


async def watched_texts(socket: Path, agent_id: str) -> list[tuple[int, str]]:
    """The agent's journaled text entries as ``agent/watch`` from 0 delivers them."""
    async with wire_client(socket) as watcher:
        await watcher.result("agent/watch", {"agentId": agent_id, "afterSeq": 0})
        await watcher.wait_for(
            lambda w: any(n["entry"]["type"] == "run_end" for n in w.events("agent/event"))
        )
        return [
            (note["seq"], note["entry"]["event"]["data"])
            for note in watcher.events("agent/event")
            if note["entry"]["type"] == "event" and note["entry"]["event"]["type"] == "text"
        ]


async def stream(wire: Wire, agent_id: str, held: HeldBack) -> tuple[str, str]:
    held.armed = True  # the stream's first frame holds the reader back
    answer = await wire.result("agent/stream", {"agentId": agent_id, "input": TEXT}, within=60)
    return answer["runId"], answer["output"]


async def test_a_caller_that_keeps_up_gets_one_frame_per_word(short_dir: Path) -> None:
    async with (
        daemon(short_dir, agents=ECHO),
        wire_client(short_dir / "bridge.sock") as caller,
    ):
        agent_id = (await caller.result("agent/open", {"profile": "echo"}))["agentId"]
        answer = await caller.result("agent/stream", {"agentId": agent_id, "input": "a b c d"})
        texts = text_frames(caller, answer["runId"])
    assert [text for _seq, text in texts] == ["a ", "b ", "c ", "d"]


async def test_a_backed_up_caller_gets_the_text_joined_and_every_reader_agrees(
    short_dir: Path,
) -> None:
    socket = short_dir / "bridge.sock"
    held = HeldBack(1.0)
    async with (
        daemon(short_dir, server=BIG_JOURNAL, agents=ECHO) as running,
        wire_client(socket, gate=held.gate) as caller,
    ):
        agent_id = (await caller.result("agent/open", {"profile": "echo"}))["agentId"]
        (session,) = service_of(running).host.agents[agent_id].users
        small_send_buffer(session)  # a slow network's socket, not a local one's 200 KB
        run_id, output = await stream(caller, agent_id, held)
        texts = text_frames(caller, run_id)
        seqs = [note["seq"] for note in caller.events("run/event") if note["runId"] == run_id]
        last = caller.events("run/event")[-1]["event"]
        journaled = await watched_texts(socket, agent_id)
    # The session file wrote each join as an append: the restarted daemon's
    # journal, resumed from it, holds the same entries.
    async with (
        daemon(short_dir, server=BIG_JOURNAL, agents=ECHO),
        wire_client(socket) as client,
    ):
        await client.result("agent/open", {"profile": "echo", "resume": agent_id})
        restored = await watched_texts(socket, agent_id)
    assert restored == journaled
    assert output == TEXT
    assert "".join(text for _seq, text in texts) == output  # §11.26: nothing lost or repeated
    assert len(texts) < WORDS  # joined while the socket was backed up
    assert max(len(text) for _seq, text in texts) <= JOIN_MAX_BYTES
    assert seqs == sorted(set(seqs))  # strictly increasing, one seq per entry
    assert journaled == texts  # the journal holds exactly what the caller was sent
    assert last["type"] == "done"  # order across types kept: done after every text


async def test_join_text_false_keeps_one_entry_per_event(short_dir: Path) -> None:
    held = HeldBack(1.0)
    async with (
        daemon(short_dir, server="join_text = false", agents=ECHO) as running,
        wire_client(short_dir / "bridge.sock", gate=held.gate) as caller,
    ):
        agent_id = (await caller.result("agent/open", {"profile": "echo"}))["agentId"]
        (session,) = service_of(running).host.agents[agent_id].users
        small_send_buffer(session)
        run_id, output = await stream(caller, agent_id, held)
        texts = text_frames(caller, run_id)
    assert len(texts) == WORDS
    assert "".join(text for _seq, text in texts) == output == TEXT


def _journal_with(*entries: dict[str, object]) -> Journal:
    journal = Journal(max_events=100, max_bytes=1 << 20)
    for data in entries:
        journal.append(data)
    return journal


def _text(run_id: str, text: str) -> dict[str, object]:
    return {"type": "event", "runId": run_id, "event": {"type": "text", "data": text}}


def test_join_text_grows_only_the_newest_unsent_text_entry_of_the_run() -> None:
    journal = _journal_with(_text("r1", "a "))
    (entry,) = journal.entries()
    assert journal.join_text(entry, "r1", "b ")
    assert entry.data["event"] == {"type": "text", "data": "a b "}
    assert (entry.seq, journal.last_seq) == (1, 1)
    assert not journal.join_text(entry, "r2", "x ")  # another run's text
    journal.take(entry)
    assert not journal.join_text(entry, "r1", "c ")  # sent to a connection
    second = journal.append(_text("r1", "c "))
    journal.append({"type": "run_end", "runId": "r1", "result": {}})
    assert not journal.join_text(second, "r1", "d ")  # no longer the newest


def test_join_text_refuses_acp_chunks_other_events_and_a_full_entry() -> None:
    chunk = {**_text("r1", "a "), "update": {"sessionUpdate": "agent_message_chunk"}}
    journal = _journal_with(chunk)
    assert not journal.join_text(journal.entries()[0], "r1", "b ")  # relayed as it came (§12.5)
    journal = _journal_with({"type": "event", "runId": "r1", "event": {"type": "done"}})
    assert not journal.join_text(journal.entries()[0], "r1", "b ")
    journal = _journal_with(_text("r1", "x" * (JOIN_MAX_BYTES - 200)))
    entry = journal.entries()[0]
    assert not journal.join_text(entry, "r1", "y" * 200)
    assert journal.join_text(entry, "r1", "y" * 10)


def test_a_join_is_persisted_as_an_append_and_counted() -> None:
    written: list[tuple[int, str | None]] = []
    journal = Journal(
        max_events=100, max_bytes=1 << 20, on_append=lambda e, text: written.append((e.seq, text))
    )
    entry = journal.append(_text("r1", "a "))
    size = entry.size
    assert journal.join_text(entry, "r1", "bcd ")
    assert written == [(1, None), (1, "bcd ")]
    assert entry.size == size + 4
