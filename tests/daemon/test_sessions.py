"""Sessions that outlive their clients (PROTOCOL.md §13), against a real daemon on a real socket.

The journal, ``agent/watch`` catch-up, ``run/result``, ``onDisconnect:
"continue"`` and the routing of permission requests to watchers.  Every
client here is a raw websocket (``support.wire``) unless the library's own
client is what is under test.
"""

from __future__ import annotations

import random
import socket
from contextlib import aclosing
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from support.wire import Wire, wire_client

from oma_bridge.client import JournalEntry, RemoteAgent, connect

from .conftest import daemon

pytestmark = pytest.mark.anyio

WORDS = 20_000
BIG_JOURNAL = "journal_max_events = 50000"


def words(count: int, prefix: str = "w") -> str:
    return " ".join(f"{prefix}{k}" for k in range(count))


def entries(wire: Wire) -> list[tuple[int, dict[str, Any]]]:
    return [(note["seq"], note["entry"]) for note in wire.events("agent/event")]


def ended(run_id: str | None = None) -> Any:
    """A ``wait_for`` predicate: the watcher saw the ``run_end`` of ``run_id`` (or of any run)."""

    def check(wire: Wire) -> bool:
        # Only the newest entry is looked at: the check runs at every frame.
        last = wire.notes[-1]["params"]["entry"] if wire.notes else {}
        return last.get("type") == "run_end" and run_id in (None, last.get("runId"))

    return check


class Leash:
    """Holds the stream's reader back while a watcher is more than ``slack`` entries behind.

    The daemon then blocks on that reader's socket, so the stream cannot
    outrun the watcher whatever the machine's speed: every drop of the
    watcher falls mid-stream, and a drop finds the watcher with little
    read ahead.  (The socket's own buffers still let the stream lead by a
    few thousand small entries.)
    """

    def __init__(self, slack: int) -> None:
        self.slack = slack
        self.read = 0
        self.followed = 0
        self._moved = anyio.Event()

    def follow(self, seq: int) -> None:
        self.followed = seq
        self._moved.set()
        self._moved = anyio.Event()

    async def gate(self) -> None:
        self.read += 1
        while self.read > self.followed + self.slack:
            await self._moved.wait()


async def test_a_watcher_that_drops_50_times_loses_and_duplicates_nothing(short_dir: Path) -> None:
    text = words(WORDS)
    rng = random.Random(12)
    socket = short_dir / "bridge.sock"
    leash = Leash(slack=500)
    with anyio.fail_after(90):
        async with (
            daemon(short_dir, server=BIG_JOURNAL),
            wire_client(socket, gate=leash.gate) as streamer,
        ):
            agent_id = (await streamer.result("agent/open", {"profile": "echo"}))["agentId"]
            collected: list[tuple[int, dict[str, Any]]] = []
            cursor = 0
            async with anyio.create_task_group() as tg:
                params = {"agentId": agent_id, "input": text, "runId": "long"}
                stream_done = anyio.Event()

                async def stream() -> None:
                    await streamer.result("agent/stream", params, within=80)
                    stream_done.set()

                tg.start_soon(stream)
                live_drops = 0
                for _round in range(50):
                    async with wire_client(socket) as watcher:
                        answer = await watcher.call(
                            "agent/watch", {"agentId": agent_id, "afterSeq": cursor}
                        )
                        # The answer's seq is the last entry of the catch-up sent before it.
                        before = entries(watcher)[: answer["notesBefore"]]
                        assert answer["result"]["seq"] == (before[-1][0] if before else cursor)
                        take = rng.randrange(0, 400)
                        await watcher.wait_for(
                            lambda w, n=take: len(w.notes) >= n or ended("long")(w)
                        )
                        live_drops += not stream_done.is_set()
                        if rng.random() < 0.5:
                            watcher.abort()  # a crash; else a clean close
                    # Whatever arrived before the drop counts; the next round resumes after it.
                    got = entries(watcher)
                    collected += got
                    if got:
                        cursor = got[-1][0]
                        leash.follow(cursor)
                    await anyio.sleep(rng.random() * 0.01)
                # The last round follows to the end of the run.
                leash.slack = WORDS * 2
                leash.follow(cursor)
                async with wire_client(socket) as watcher:
                    await watcher.result("agent/watch", {"agentId": agent_id, "afterSeq": cursor})
                    await watcher.wait_for(ended("long"), within=80)
                    collected += entries(watcher)
            assert live_drops == 50, "the stream ended before the watcher dropped mid-way"
            async with wire_client(socket) as reference:
                await reference.result("agent/watch", {"agentId": agent_id, "afterSeq": 0})
                await reference.wait_for(ended("long"))
                everything = entries(reference)
    seqs = [seq for seq, _ in collected]
    assert seqs == sorted(set(seqs)), "a seq came twice or out of order"
    assert collected == everything
    texts = [
        entry["event"]["data"]
        for _, entry in collected
        if entry["type"] == "event" and entry["event"]["type"] == "text"
    ]
    assert "".join(texts) == text
    assert len(texts) == WORDS
    assert collected[0][1]["type"] == "run_start" and collected[-1][1]["type"] == "run_end"
    # The run's own connection saw the same entries, seq for seq.
    own = [(e["seq"], e["event"]) for e in streamer.events("run/event")]
    assert own == [(s, e["event"]) for s, e in everything if e["type"] == "event"]


def small_send_buffer(session: Any) -> None:
    """Shrink the daemon's send buffers of one connection, so its stream cannot run far ahead.

    The leash holds the reader back; these buffers are what the daemon can
    still write meanwhile (the kernel's ~200 KB would hold ~2,000 entries).
    """
    transport = session._drop.__self__  # the connection's drop is its transport's abort
    transport.set_write_buffer_limits(high=4096)
    transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)


def service_of(running: Any) -> Any:
    """The daemon's :class:`AgentService` (its ``agent/watch`` handler's owner), to peek at."""
    return running.gateway.methods.get("agent/watch").__self__


async def test_remote_agent_watch_reconnects_through_50_drops_and_loses_nothing(
    short_dir: Path,
) -> None:
    """The library's watcher, its connection dropped 50 times by the daemon mid-stream.

    Each drop waits until the watcher has taken (nearly) every entry the
    daemon sent it, so that it reconnects at once with next to nothing left to
    drain, then aborts the daemon's side of the watch connection.
    """
    text = words(WORDS)
    rng = random.Random(7)
    leash = Leash(slack=100)
    with anyio.fail_after(90):
        async with (
            daemon(short_dir, server=BIG_JOURNAL) as running,
            wire_client(short_dir / "bridge.sock", gate=leash.gate) as streamer,
            connect(socket=short_dir / "bridge.sock", client_name="watcher") as client,
        ):
            agent_id = (await streamer.result("agent/open", {"profile": "echo"}))["agentId"]
            hosted = service_of(running).agents[agent_id]
            (streaming,) = hosted.users
            small_send_buffer(streaming)
            watched = RemoteAgent(client, agent_id, "echo", None, None)
            collected: list[JournalEntry] = []
            drops = 0

            def drop_when_drained(seq: int) -> bool:
                """Abort the live watch connection once its watcher has read (nearly) all it got."""
                for session, watcher in list(hosted.watchers.items()):
                    if not session.closed and watcher.cursor - seq <= 2:
                        session.drop()
                        return True
                return False

            async with anyio.create_task_group() as tg:
                params = {"agentId": agent_id, "input": text}
                tg.start_soon(partial(streamer.result, "agent/stream", params, within=80))
                next_drop = rng.randrange(1, 200)
                async with aclosing(watched.watch(after_seq=0, retry_s=0.01)) as items:
                    async for item in items:
                        collected.append(item)
                        leash.follow(item.seq)
                        if item.entry["type"] == "run_end":
                            break
                        due = drops < 50 and len(collected) >= next_drop
                        if due and drop_when_drained(item.seq):
                            drops += 1
                            next_drop = len(collected) + rng.randrange(1, 200)
            assert drops == 50
            async with wire_client(short_dir / "bridge.sock") as reference:
                await reference.result("agent/watch", {"agentId": agent_id, "afterSeq": 0})
                await reference.wait_for(ended())
                everything = entries(reference)
    assert [(item.seq, item.entry) for item in collected] == everything
    assert "".join(item.text or "" for item in collected) == text
