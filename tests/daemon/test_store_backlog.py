"""A disk slower than the streams: the session store's backlog stays bounded.

The writer thread's writes are slowed (a disk of 16 MiB/s);
the loop's side hands it far more than ``MAX_BACKLOG_BYTES`` of stream
lines. Persistence turns off with one warning, as for a full disk, what
was queued is dropped rather than held, and the file left behind is a
readable prefix of the session.
"""

from __future__ import annotations

import logging
import time
import tracemalloc
from pathlib import Path

import anyio
import pytest

from oma_bridge.server.agents import store as store_module
from oma_bridge.server.agents.store import MAX_BACKLOG_BYTES, SessionStore

pytestmark = pytest.mark.anyio

CHUNK = "x" * (256 * 1024)
#: The slowed disk: 16 MiB/s, far below what the loop hands it here.
DISK_BYTES_PER_S = 16 * 1024 * 1024


async def test_a_slow_disk_turns_persistence_off_instead_of_growing_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_write_all = store_module._write_all  # noqa: SLF001 — the store's one disk write, slowed

    def slow_write_all(fd: int, chunks: list[bytes]) -> None:
        time.sleep(sum(len(chunk) for chunk in chunks) / DISK_BYTES_PER_S)
        real_write_all(fd, chunks)

    monkeypatch.setattr(store_module, "_write_all", slow_write_all)
    caplog.set_level(logging.WARNING, logger="oma_bridge.server")
    store = SessionStore(tmp_path / "sessions")
    assert store.load() == []
    async with anyio.create_task_group() as tg:
        tg.start_soon(store.run)
        try:
            store.create("agt_slow", "echo", {})
            await anyio.sleep(0.2)  # the header is on disk
            seq = 0
            # Four times the bound, far faster than the slowed disk takes it.
            while seq * len(CHUNK) < 4 * MAX_BACKLOG_BYTES:
                seq += 1
                entry = {"type": "event", "runId": "r", "event": {"type": "text", "data": CHUNK}}
                store.write("agt_slow", {"seq": seq, "entry": entry}, batch=True)
                await anyio.sleep(0.001)  # a stream yields between its chunks
            assert not store.enabled
            behind = store._queued_bytes - store._done_bytes  # noqa: SLF001 — the writer's backlog, bounded
            assert behind <= MAX_BACKLOG_BYTES + 2 * len(CHUNK) + 1024
        finally:
            store.close()  # the writer thread ends only so (it cannot be cancelled)
    warnings = [r.getMessage() for r in caplog.records if "behind the streams" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "sessions stay in memory only" in warnings[0]
    # What reached the disk is a prefix a restart can read: entries 1..n, in order.
    (session,) = SessionStore(tmp_path / "sessions").load()
    seqs = [seq for seq, _entry in session.entries]
    assert seqs == list(range(1, len(seqs) + 1))
    assert len(seqs) < seq


async def test_a_disk_that_keeps_up_keeps_every_line(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "sessions")
    store.load()
    async with anyio.create_task_group() as tg:
        tg.start_soon(store.run)
        try:
            store.create("agt_fast", "echo", {})
            for seq in range(1, 201):
                entry = {"type": "event", "runId": "r", "event": {"type": "text", "data": "word "}}
                store.write("agt_fast", {"seq": seq, "entry": entry}, batch=True)
            store.sync("agt_fast")
        finally:
            store.close()
    assert store.enabled
    (session,) = SessionStore(tmp_path / "sessions").load()
    assert [seq for seq, _entry in session.entries] == list(range(1, 201))


async def test_a_cancelled_writer_finishes_what_was_queued_and_ends(tmp_path: Path) -> None:
    # The daemon's task group may be cancelled (a crash of a sibling task)
    # before close(): the writer thread must end, not hold the group forever.
    store = SessionStore(tmp_path / "sessions")
    store.load()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.run)
            store.create("agt_cut", "echo", {})
            entry = {"type": "event", "runId": "r", "event": {"type": "text", "data": "word"}}
            store.write("agt_cut", {"seq": 1, "entry": entry})
            await anyio.sleep(0.1)
            tg.cancel_scope.cancel()
    (session,) = SessionStore(tmp_path / "sessions").load()
    assert [seq for seq, _entry in session.entries] == [1]


def test_a_queued_line_holds_about_its_length(tmp_path: Path) -> None:
    """What waits for the writer is counted in lengths: each line must cost about that.

    orjson (3.12 on) hands back bytes of at least 4 KiB however short: queued as
    they are, 2,000 headers of ~120 bytes waiting for a busy writer (agents opened
    and closed in a burst) held ~8 MiB, and the backlog's bound did not bound memory.
    """
    store = SessionStore(tmp_path / "sessions")
    assert store.load() == []
    count = 2000
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(count):
            agent_id = f"agt_{index:016x}"
            store.create(agent_id, "echo", {})
            store.write(agent_id, {"history": []})  # a line not batched goes to the queue
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        store.close()
    queued = store._queued_bytes  # noqa: SLF001 — what the backlog's bound counts
    # Per agent: two lines of ~120 bytes (~60 bytes each over their length, with
    # their tuples) and its name in the set of sessions on disk, ~460 bytes in
    # all; a 4 KiB allocation per line is ~4,400.
    per_agent = held / count
    assert per_agent < 1024, f"{per_agent:.0f} bytes held per agent for {queued / count:.0f} queued"
