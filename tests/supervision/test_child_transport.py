"""Children forked on the loop's thread or off it (child_transport.py), and what a run leaves."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import weakref
from collections.abc import Iterator

import anyio
import pytest

from oma_bridge.supervision.child_transport import ChildTransport, pidfd_spawn, start_child
from oma_bridge.supervision.pipes import ChildProtocol, StderrTail
from oma_bridge.supervision.supervisor import Supervisor

pytestmark = pytest.mark.anyio


@pytest.fixture
def supervisor() -> Iterator[Supervisor]:
    made = Supervisor()
    try:
        yield made
    finally:
        made.close()


@pytest.mark.parametrize("off_loop", [True, False])
async def test_the_fork_happens_where_the_caller_asked(
    off_loop: bool, popen_threads: dict[str, list[threading.Thread]]
) -> None:
    assert pidfd_spawn(asyncio.get_running_loop())  # Linux with pidfds, asyncio's loop
    protocol = ChildProtocol(StderrTail())
    transport = await start_child(
        protocol,
        [sys.executable, "-c", "print('hi')"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=None,
        env={"PATH": "/usr/bin:/bin"},
        off_loop=off_loop,
    )
    assert isinstance(transport, ChildTransport)  # a pidfd watches it either way
    [thread] = popen_threads[os.path.basename(sys.executable)]  # noqa: PTH119
    assert (thread is threading.main_thread()) is not off_loop
    with anyio.fail_after(10):
        await protocol.closed.wait()
    assert transport.get_returncode() == 0
    assert transport.get_pipe_transport(0) is None  # no stdin pipe asked for
    transport.close()


@pytest.mark.parametrize("fork_off_loop", [True, False])
async def test_a_supervisor_forks_where_its_owner_chose(
    fork_off_loop: bool, popen_threads: dict[str, list[threading.Thread]]
) -> None:
    """The library's default forks on the loop (the fastest run); the daemon's off it."""
    made = Supervisor(fork_off_loop=fork_off_loop)
    try:
        process = await made.spawn(["cat"])
        await process.stop(5.0, close_stdin_first=True)
    finally:
        made.close()
    assert process.returncode == 0
    [thread] = popen_threads["cat"]
    assert (thread is threading.main_thread()) is not fork_off_loop
    assert Supervisor().fork_off_loop is False


async def test_stdin_written_at_once_after_the_spawn_reaches_the_child(
    supervisor: Supervisor,
) -> None:
    process = await supervisor.spawn(["cat"])
    assert process.stdin is not None
    await process.stdin.send(b"first write, no wait before it")  # connection_made came first
    with anyio.fail_after(10):
        assert await process.stdout.receive() == b"first write, no wait before it"
    await process.stop(5.0, close_stdin_first=True)
    assert process.returncode == 0


async def test_a_child_that_exits_before_its_pipes_are_read_is_seen_whole(
    supervisor: Supervisor,
) -> None:
    process = await supervisor.spawn(
        [sys.executable, "-c", "import sys; sys.stdout.write('out'); sys.stderr.write('err')"],
        stdin=False,
    )
    with anyio.fail_after(10):
        await process.wait_closed()
        assert await process.stdout.receive() == b"out"
    assert process.returncode == 0
    assert process.stderr.text() == "err"
    await process.stop(1.0)


async def test_closing_the_transport_kills_a_child_still_running() -> None:
    protocol = ChildProtocol(StderrTail())
    transport = await start_child(
        protocol,
        ["sleep", "60"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=None,
        env={"PATH": "/usr/bin:/bin"},
    )
    transport.close()
    with anyio.fail_after(10):
        await protocol.closed.wait()
    assert transport.get_returncode() == -9


async def test_a_command_that_cannot_start_raises_and_leaves_nothing(
    supervisor: Supervisor,
) -> None:
    with pytest.raises(FileNotFoundError):
        await supervisor.spawn(["/nonexistent/oma-bridge-no-such-command"])
    assert await supervisor.processes() == []


async def test_a_finished_run_leaves_no_cycle_for_the_collector(
    supervisor: Supervisor, no_collector: None
) -> None:
    """The child's handle, protocol, transport and pipes go when the run ends, collector off.

    A daemon running a few hundred process runs a second left each run's
    objects to the cyclic collector, whose collections then stopped the loop
    for tens of milliseconds (docs/benchmarks.md, "Load").
    """
    refs: list[weakref.ref[object]] = []
    for _ in range(3):
        process = await supervisor.spawn(["cat"])
        assert process.stdin is not None
        process.stdin.write_and_close(b"hello")
        with anyio.fail_after(10):
            assert await process.stdout.receive() == b"hello"
            await process.wait_closed()
        await process.stop(5.0)
        refs += [weakref.ref(process), weakref.ref(process.stdout), weakref.ref(process.stdin)]
        del process
    await anyio.sleep(0.1)  # the transports' last callbacks
    assert [ref() for ref in refs] == [None] * len(refs)
