"""The client's handles against a live daemon: streams and watches entered or bare, no leftovers."""

from __future__ import annotations

import ast
import gc
from pathlib import Path

import anyio
import pytest
from daemon.conftest import daemon, short_dir

import oma_bridge.client
from oma_bridge.client import Client, connect

__all__ = ["short_dir"]

pytestmark = pytest.mark.anyio


async def _runs_and_connections(client: Client) -> tuple[list[str], int]:
    status = await client.status()
    return [run["runId"] for run in status["runs"]], int(status["connections"])


async def _until_connections(client: Client, count: int) -> None:
    with anyio.fail_after(10):
        while True:
            if (await _runs_and_connections(client))[1] == count:
                return
            await anyio.sleep(0.02)


async def test_an_entered_stream_gives_its_events_and_its_result(short_dir: Path) -> None:
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        agent = await client.open("echo")
        async with agent.stream("one two", run_id="r-entered") as stream:
            events = [event async for event in stream]
        assert [e.type for e in events] == ["text", "text", "done"]
        assert stream.result is not None and stream.result.output == "one two"
        assert stream.result.run_id == "r-entered"
        with pytest.raises(RuntimeError, match="entered once"):
            async with stream:
                pass


async def test_leaving_an_entered_stream_early_cancels_the_run_and_waits_for_it(
    short_dir: Path,
) -> None:
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        agent = await client.open("sleeper")  # prints "started", then sleeps for a minute
        with anyio.fail_after(15):
            async with agent.stream("go", run_id="r-left") as stream:
                async for event in stream:
                    assert event.type == "text"
                    break
        # The block returned with the run over: cancelled, nothing of it left in the daemon.
        assert stream.result is not None and stream.result.status.code == "cancelled"
        assert (await _runs_and_connections(client)) == ([], 1)


async def test_an_error_answer_is_raised_by_the_iteration_of_either_form(short_dir: Path) -> None:
    from oma_bridge.client import RemoteInvalidMessageError

    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        agent = await client.open("echo")
        with pytest.raises(RemoteInvalidMessageError):
            async with agent.stream([{"role": "robot"}]) as stream:
                async for _ in stream:
                    pass
        with pytest.raises(RemoteInvalidMessageError):
            async for _ in agent.stream([{"role": "robot"}]):
                pass


async def test_an_entered_watch_replays_follows_and_closes_its_connection(short_dir: Path) -> None:
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        agent = await client.open("echo")
        await agent.run("before")
        async with agent.watch(after_seq=0) as entries:
            seen = []
            async for entry in entries:
                seen.append(entry)
                if entry.type == "run_end" and len(seen) > 3:
                    break
                if entry.type == "run_end":
                    await agent.run("during")  # live, after the replay
        assert [e.type for e in seen if e.type != "event"] == ["run_start", "run_end"] * 2
        assert [e.seq for e in seen] == list(range(1, len(seen) + 1))  # none skipped or twice
        assert "".join(e.text or "" for e in seen) == "beforeduring"
        assert entries.seq == seen[-1].seq
        await _until_connections(client, 1)  # the watch's own connection is gone


async def test_a_bare_watch_dropped_early_stops_and_the_clients_block_ends_the_rest(
    short_dir: Path,
) -> None:
    async with daemon(short_dir):
        async with connect(discovery_dir=short_dir) as client:
            agent = await client.open("echo")
            await agent.run("x")
            async for _entry in agent.watch(after_seq=0):
                break  # dropped, never closed: collected, it stops
            gc.collect()
            await _until_connections(client, 1)
            kept = client.watch(agent.agent_id, after_seq=0)
            assert (await kept.__anext__()).type == "run_start"
            await _until_connections(client, 2)
        # The client's block ended the watch it never closed: what it had buffered, then the end.
        with anyio.fail_after(5):
            rest = [entry async for entry in kept]
        assert all(entry.agent_id == agent.agent_id for entry in rest)
        async with connect(discovery_dir=short_dir) as other:
            await _until_connections(other, 1)


def test_no_async_generator_of_the_client_yields_inside_a_with_block() -> None:
    """A ``yield`` inside ``async with`` / ``with`` of an async generator leaves a task group
    or a cancel scope open in the consumer's frame: the handles are iterators instead."""
    offenders = []
    for path in Path(oma_bridge.client.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.AsyncFunctionDef):
                continue
            decorators = {ast.unparse(d) for d in function.decorator_list}
            if decorators & {"contextlib.asynccontextmanager", "asynccontextmanager"}:
                continue  # the block's body is the consumer's: that is structure, not a leak
            for block in ast.walk(function):
                if isinstance(block, ast.With | ast.AsyncWith) and any(
                    isinstance(node, ast.Yield) for node in ast.walk(block)
                ):
                    offenders.append(f"{path.name}:{function.name}")
    assert offenders == []
