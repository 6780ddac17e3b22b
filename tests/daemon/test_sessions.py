"""Sessions that outlive their clients (PROTOCOL.md §13), against a real daemon on a real socket.

The journal, ``agent/watch`` catch-up, ``run/result``, ``onDisconnect:
"continue"`` and the routing of permission requests to watchers.  Every
client here is a raw websocket (``support.wire``) unless the library's own
client is what is under test.
"""

from __future__ import annotations

import random
import sys
from contextlib import aclosing
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import orjson
import psutil
import pytest
from support.wire import Wire, wire_client

from oma_bridge.client import JournalEntry, RemoteAgent, connect

from .conftest import daemon, service_of, small_send_buffer

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_daemon_errors")]

AGENTS_DIR = Path(__file__).resolve().parent.parent / "agents"
SESSION_AGENTS = f"""
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"

[agents.asker]
kind = "acp"
command = "{sys.executable}"
args = ["{AGENTS_DIR / "acp_scenario_agent.py"}"]
env = {{ PYTHONUNBUFFERED = "1" }}
permission = "client"

[agents.slow_done]
kind = "process"
command = "{sys.executable}"
args = ["-c", "import time; print('started', flush=True); time.sleep(1.0); print('done')"]
input = "none"
"""


WORDS = 20_000
BIG_JOURNAL = "journal_max_events = 50000"
#: For the leashed streams: the leash backs the stream's socket up, which
#: would join its words (D19) into a few large entries, and these tests count
#: their watcher's drops in entries.  Joining has tests of its own
#: (test_joining.py); here one entry per word keeps the drops mid-stream.
LEASHED = BIG_JOURNAL + "\njoin_text = false"


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
            daemon(short_dir, server=LEASHED),
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
            daemon(short_dir, server=LEASHED) as running,
            wire_client(short_dir / "bridge.sock", gate=leash.gate) as streamer,
            connect(socket=short_dir / "bridge.sock", client_name="watcher") as client,
        ):
            agent_id = (await streamer.result("agent/open", {"profile": "echo"}))["agentId"]
            hosted = service_of(running).host.agents[agent_id]
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
                        if item.entry["type"] == "run_end":
                            break
                        due = drops < 50 and len(collected) >= next_drop
                        if not due:
                            leash.follow(item.seq)
                        elif drop_when_drained(item.seq):
                            # While a drop is due the leash stays where it is: the
                            # stream stops, and the watcher drains what it was sent
                            # whatever the daemon's speed against this reader's.
                            drops += 1
                            next_drop = len(collected) + rng.randrange(1, 200)
                            leash.follow(item.seq)
            assert drops == 50
            async with wire_client(short_dir / "bridge.sock") as reference:
                await reference.result("agent/watch", {"agentId": agent_id, "afterSeq": 0})
                await reference.wait_for(ended())
                everything = entries(reference)
    assert [(item.seq, item.entry) for item in collected] == everything
    assert "".join(item.text or "" for item in collected) == text


# ---------------------------------------------------------------------------
# permission requests routed to watchers (§13.3, §12.7), and the audit log (§14)


def audit_records(folder: Path) -> list[dict[str, Any]]:
    """The in-process daemon's audit log (``run_daemon(state_dir=folder / "state")``)."""
    path = folder / "state" / "audit.jsonl"
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def connection_id(running: Any, name: str) -> str:
    (session,) = [
        s
        for s in running.gateway.sessions
        if s.init is not None and s.init.clientInfo.name == name and not s.closed
    ]
    return str(session.id)


async def test_two_watchers_asked_first_answer_wins_the_other_is_withdrawn(
    short_dir: Path,
) -> None:
    socket_path = short_dir / "bridge.sock"
    with anyio.fail_after(30):
        async with (
            daemon(short_dir, agents=SESSION_AGENTS) as running,
            # The run's own connection did not declare permissions.
            wire_client(socket_path, name="runner") as runner,
            wire_client(socket_path, name="alice", permissions=True) as alice,
            wire_client(socket_path, name="bob", permissions=True) as bob,
        ):
            agent_id = (await runner.result("agent/open", {"profile": "asker"}))["agentId"]
            for watcher in (alice, bob):
                await watcher.result("agent/watch", {"agentId": agent_id})
            async with anyio.create_task_group() as tg:
                outcome: list[Any] = []

                async def run() -> None:
                    params = {"agentId": agent_id, "input": "tools", "runId": "r-ask"}
                    outcome.append(await runner.result("agent/prompt", params, within=25))

                tg.start_soon(run)
                await alice.wait_for(lambda w: bool(w.asks), within=25)
                await bob.wait_for(lambda w: bool(w.asks))
                (to_alice,), (to_bob,) = alice.asks, bob.asks
                assert to_alice["method"] == to_bob["method"] == "permission/request"
                params = to_alice["params"]
                assert params["agentId"] == agent_id and params["runId"] == "r-ask"
                assert params["toolCall"]["toolCallId"] == "t1"
                assert [o["optionId"] for o in params["options"]] == ["aa", "ao", "ro", "ra"]
                await alice.answer(to_alice, {"outcome": {"outcome": "selected", "optionId": "ao"}})
                cancel = {"method": "$/cancel_request", "params": {"id": to_bob["id"]}}
                await bob.wait_for(lambda w: any(_matches(n, cancel) for n in w.notes))
                # Bob's late answer is ignored.
                await bob.answer(to_bob, {"outcome": {"outcome": "selected", "optionId": "ra"}})
            (result,) = outcome
            assert result["success"], result
            assert result["output"] == "permission:ao"
            assert not any(n["method"] == "$/cancel_request" for n in alice.notes)
            alice_connection = connection_id(running, "alice")
    (record,) = [r for r in audit_records(short_dir) if r["event"] == "permission"]
    assert record["agentId"] == agent_id and record["runId"] == "r-ask"
    assert record["toolCall"] == {"toolCallId": "t1", "title": "Edit file", "kind": "edit"}
    assert record["options"] == ["aa", "ao", "ro", "ra"]
    assert record["outcome"] == {"outcome": "selected", "optionId": "ao"}
    assert record["decidedBy"] == {
        "client": {"name": "alice", "version": "1.0"},
        "connection": alice_connection,
    }
    assert record["ts"].endswith("Z")


def _matches(note: dict[str, Any], expected: dict[str, Any]) -> bool:
    return note.get("method") == expected["method"] and note.get("params") == expected["params"]


async def test_the_runs_own_connection_leaves_and_a_watcher_decides(short_dir: Path) -> None:
    socket_path = short_dir / "bridge.sock"
    with anyio.fail_after(30):
        async with (
            daemon(short_dir, agents=SESSION_AGENTS) as running,
            wire_client(socket_path, name="carol", permissions=True) as carol,
        ):
            async with wire_client(socket_path, name="runner", permissions=True) as runner:
                agent_id = (await runner.result("agent/open", {"profile": "asker"}))["agentId"]
                await carol.result("agent/watch", {"agentId": agent_id})
                params = {
                    "agentId": agent_id,
                    "input": "tools",
                    "runId": "r-left",
                    "onDisconnect": "continue",
                }
                await runner.send({"id": "run", "method": "agent/prompt", "params": params})
                # The run's own connection is asked first; it leaves without answering.
                await runner.wait_for(lambda w: bool(w.asks), within=25)
                runner.abort()
            await carol.wait_for(lambda w: bool(w.asks), within=10)
            (ask,) = carol.asks
            await carol.answer(ask, {"outcome": {"outcome": "selected", "optionId": "ro"}})
            await carol.wait_for(ended("r-left"))
            result = carol.events("agent/event")[-1]["entry"]["result"]
            assert result["output"] == "permission:ro"
            carol_connection = connection_id(running, "carol")
    (record,) = [r for r in audit_records(short_dir) if r["event"] == "permission"]
    assert record["decidedBy"]["client"]["name"] == "carol"
    assert record["decidedBy"]["connection"] == carol_connection


async def test_nobody_to_ask_is_the_least_privilege_reject_by_no_client(short_dir: Path) -> None:
    with anyio.fail_after(30):
        async with (
            daemon(short_dir, agents=SESSION_AGENTS),
            wire_client(short_dir / "bridge.sock", name="runner") as runner,
        ):
            agent_id = (await runner.result("agent/open", {"profile": "asker"}))["agentId"]
            params = {"agentId": agent_id, "input": "tools", "runId": "r-none"}
            result = await runner.result("agent/prompt", params, within=25)
    assert result["output"] == "permission:ro"  # reject_once, before reject_always
    (record,) = [r for r in audit_records(short_dir) if r["event"] == "permission"]
    assert record["decidedBy"] == "no-client"
    assert record["outcome"] == {"outcome": "selected", "optionId": "ro"}
    assert record["runId"] == "r-none"


# ---------------------------------------------------------------------------
# onDisconnect: "continue", run/result and the cursor errors


async def test_a_continued_process_run_finishes_after_its_client_left(short_dir: Path) -> None:
    socket_path = short_dir / "bridge.sock"
    with anyio.fail_after(30):
        async with (
            daemon(short_dir, agents=SESSION_AGENTS),
            wire_client(socket_path, name="observer") as observer,
        ):
            async with wire_client(socket_path, name="leaver") as leaver:
                agent_id = (await leaver.result("agent/open", {"profile": "slow_done"}))["agentId"]
                await observer.result("agent/watch", {"agentId": agent_id})
                params = {"agentId": agent_id, "input": "go", "runId": "r-bg"}
                await leaver.send(
                    {
                        "id": "run",
                        "method": "agent/stream",
                        "params": {**params, "onDisconnect": "continue"},
                    }
                )
                # Leave once the process has said it started.
                await leaver.wait_for(lambda w: bool(w.events("run/event")))
                status = await observer.result("daemon/status")
                (child,) = [p for p in status["processes"] if p["runId"] == "r-bg"]
                process = psutil.Process(child["pid"])
                leaver.abort()
            running = await observer.error("run/result", {"runId": "r-bg"})
            assert running["code"] == -32014
            assert running["data"] == {"running": True, "details": running["message"]}
            await observer.wait_for(ended("r-bg"), within=15)
            result = await observer.result("run/result", {"runId": "r-bg"})
            assert result["success"], result
            assert result["output"] == "started\ndone\n"
            # It ended by itself (exit 0), not by a kill: psutil saw it exit.
            assert not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
            unknown = await observer.error("run/result", {"runId": "never-was"})
            assert unknown["code"] == -32011
            assert unknown["data"] == {"name": "NotFound", "details": unknown["message"]}


async def test_a_continued_stream_outlives_its_client_and_its_text_is_whole(
    short_dir: Path,
) -> None:
    text = words(5_000)
    socket_path = short_dir / "bridge.sock"
    with anyio.fail_after(30):
        async with daemon(short_dir, server=BIG_JOURNAL), wire_client(socket_path) as observer:
            async with wire_client(socket_path) as leaver:
                agent_id = (await leaver.result("agent/open", {"profile": "echo"}))["agentId"]
                params = {"agentId": agent_id, "input": text, "onDisconnect": "continue"}
                await leaver.send({"id": "s", "method": "agent/stream", "params": params})
                await leaver.wait_for(lambda w: len(w.notes) >= 100)
                leaver.abort()  # mid-stream, in the middle of the daemon's sends
            await observer.result("agent/watch", {"agentId": agent_id, "afterSeq": 0})
            await observer.wait_for(ended(), within=25)
            result = entries(observer)[-1][1]["result"]
            assert result["success"] and result["output"] == text


async def test_cursor_errors(short_dir: Path) -> None:
    with anyio.fail_after(20):
        async with (
            daemon(short_dir, server="journal_max_events = 5"),
            wire_client(short_dir / "bridge.sock") as client,
        ):
            agent_id = (await client.result("agent/open", {"profile": "echo"}))["agentId"]
            fresh = await client.result("agent/watch", {"agentId": agent_id, "afterSeq": 0})
            assert fresh == {"seq": 0}
            await client.result("agent/unwatch", {"agentId": agent_id})
            for k in range(3):  # 3 entries each: run_start, one text event, run_end
                await client.result("agent/run", {"agentId": agent_id, "input": f"r{k}"})
            # 9 entries written, the newest 5 kept: seqs 5..9.
            expired = await client.error("agent/watch", {"agentId": agent_id, "afterSeq": 3})
            assert expired["code"] == -32013
            assert expired["data"] == {
                "name": "CursorExpired",
                "oldestSeq": 5,
                "details": expired["message"],
            }
            # afterSeq = oldestSeq - 1 is still whole.
            caught_up = await client.result("agent/watch", {"agentId": agent_id, "afterSeq": 4})
            assert caught_up == {"seq": 9}
            assert [note["params"]["seq"] for note in client.notes] == [5, 6, 7, 8, 9]
            beyond = await client.error("agent/watch", {"agentId": agent_id, "afterSeq": 10})
            assert beyond["code"] == -32602
            unknown = await client.error("agent/watch", {"agentId": "agt_nope"})
            assert unknown["code"] == -32011


# ---------------------------------------------------------------------------
# session files


async def test_session_files_are_private_and_removed_on_close(short_dir: Path) -> None:
    sessions = short_dir / "state" / "sessions"
    with anyio.fail_after(20):
        async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
            agent = await client.open("echo")
            await agent.prompt("keep me")
            path = sessions / f"{agent.agent_id}.jsonl"
            # The file is made when the agent opens; its header comes from the writer thread.
            while not path.exists() or not path.stat().st_size:  # noqa: ASYNC110
                await anyio.sleep(0.01)
            assert sessions.stat().st_mode & 0o777 == 0o700
            assert path.stat().st_mode & 0o777 == 0o600
            assert (await client.status())["sessions"] == 1
            header = orjson.loads(path.read_bytes().splitlines()[0])
            assert header["agentId"] == agent.agent_id and header["profile"] == "echo"
            await agent.close()
            while path.exists():  # noqa: ASYNC110
                await anyio.sleep(0.01)
            assert (await client.status())["sessions"] == 0


async def test_a_watch_from_now_that_drops_before_any_entry_misses_nothing(
    short_dir: Path,
) -> None:
    """Without afterSeq the watch starts at the answer's seq, and a reconnect resumes there."""
    with anyio.fail_after(20):
        async with (
            daemon(short_dir) as running,
            connect(socket=short_dir / "bridge.sock") as client,
            connect(socket=short_dir / "bridge.sock") as runner,
        ):
            agent = await runner.open("echo")
            await agent.run("before the watch")
            hosted = service_of(running).host.agents[agent.agent_id]
            watched = RemoteAgent(client, agent.agent_id, "echo", None, None)
            got: list[JournalEntry] = []
            four = anyio.Event()

            async def consume() -> None:  # the watch lives in this one task
                async with aclosing(watched.watch(retry_s=0.3)) as items:
                    async for item in items:
                        got.append(item)
                        if len(got) == 4:
                            four.set()
                            return

            async with anyio.create_task_group() as tg:
                tg.start_soon(consume)
                while not hosted.watchers:  # noqa: ASYNC110 (the daemon's own state)
                    await anyio.sleep(0.01)
                (session,) = hosted.watchers
                session.drop()
                while hosted.watchers:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
                # A whole run while the watcher is away (it retries in 0.3 s).
                await agent.run("while away")
                await four.wait()
    assert [item.entry["type"] for item in got] == ["run_start", "event", "event", "run_end"]
    assert "".join(item.text or "" for item in got) == "while away"
    assert got[0].seq == 6  # after the first run's 5 entries


async def test_an_acp_agents_raw_updates_are_update_entries(short_dir: Path) -> None:
    with anyio.fail_after(30):
        async with (
            daemon(short_dir, agents=SESSION_AGENTS),
            wire_client(short_dir / "bridge.sock") as client,
        ):
            agent_id = (await client.result("agent/open", {"profile": "asker"}))["agentId"]
            params = {"agentId": agent_id, "input": "thought", "runId": "r-t"}
            await client.result("agent/stream", params, within=25)
            await client.result("agent/watch", {"agentId": agent_id, "afterSeq": 0})
            journal = [entry for _, entry in entries(client)]
            streamed = [note["event"] for note in client.events("run/event")]
    kinds = [e["type"] for e in journal]
    assert kinds == ["run_start", "event", "update", "event", "event", "run_end"]
    assert journal[4]["event"]["type"] == "done"  # a stream's done event is journaled too
    plan = journal[2]["update"]
    assert plan["sessionUpdate"] == "plan" and plan["entries"][0]["content"] == "step one"
    assert journal[1]["event"] == {"type": "reasoning", "data": "thinking..."}
    # The run's own stream carries it as a typed `plan` event (D15), the update's
    # fields without its discriminator, with the seq of its update entry.
    data = {key: value for key, value in plan.items() if key != "sessionUpdate"}
    assert {"type": "plan", "data": data} in streamed
