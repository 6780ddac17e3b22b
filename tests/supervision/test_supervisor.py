"""The supervisor on its own: crash safety, leftover reaping, the close sequence."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import orjson
import psutil
import pytest
from process.conftest import AGENTS, kill_all, tree_pids, wait_gone

from oma_bridge.backends.process import (
    Supervisor,
    configure_supervisor,
    default_supervisor,
    reap_leftovers,
)
from oma_bridge.supervision.exits import describe_exit, exit_parts
from oma_bridge.supervision.supervisor import TAG_VARIABLE, SupervisedProcess
from oma_bridge.supervision.watchdog import start_time

pytestmark = pytest.mark.anyio


class Parent:
    """``tests/agents/proc_parent.py``: a real process holding a supervised tree."""

    def __init__(self, state_dir: Path | None, *flags: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(AGENTS / "proc_parent.py"), str(state_dir or "-"), *flags],
            stdout=subprocess.PIPE,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, "the parent died before its tree ran"
        self.pids: dict[str, int] = orjson.loads(line)

    @property
    def tree(self) -> list[int]:
        return [self.pids["child"], self.pids["grandchild"]]

    def sigkill(self) -> None:
        self.process.kill()
        self.process.wait()

    def cleanup(self) -> None:
        kill_all([self.process.pid, self.pids["watchdog"], *self.tree])
        self.process.wait()


def _registered(state_dir: Path, pid: int, line: str = "+") -> Path:
    """The state file, once the watchdog (a separate process) has logged ``pid``."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for path in state_dir.glob("*.state"):
            if f"\n{line}{pid} " in path.read_text():
                return path
        time.sleep(0.01)
    raise AssertionError(f"{line}{pid} never reached a state file")


@pytest.fixture
def parents() -> Iterator[list[Parent]]:
    started: list[Parent] = []
    yield started
    for parent in started:
        parent.cleanup()


@pytest.mark.parametrize("flags", [(), ("--ignore-term",), ("--escape", "--ignore-term")], ids=str)
def test_sigkill_of_the_parent_ends_its_children_and_grandchildren(
    parents: list[Parent], flags: tuple[str, ...]
) -> None:
    parent = Parent(None, *flags)
    parents.append(parent)
    assert not wait_gone(parent.tree, within=0.2)  # the tree really runs
    parent.sigkill()
    assert wait_gone([*parent.tree, parent.pids["watchdog"]], within=3.0)


def test_state_file_lets_the_next_start_reap_what_a_dead_watchdog_left(
    parents: list[Parent], tmp_path: Path
) -> None:
    parent = Parent(tmp_path, "--escape")
    parents.append(parent)
    state_file = _registered(tmp_path, parent.pids["child"])
    # Watchdog and daemon die together (an OOM kill, a kill of both): nobody reaps.
    os.kill(parent.pids["watchdog"], signal.SIGKILL)
    parent.sigkill()
    assert not wait_gone(parent.tree, within=0.3)
    assert reap_leftovers(tmp_path) == 1
    assert wait_gone(parent.tree, within=2.0)
    assert not state_file.exists()


def test_reaping_leaves_a_live_daemon_and_recycled_pids_alone(
    parents: list[Parent], tmp_path: Path
) -> None:
    parent = Parent(tmp_path)
    parents.append(parent)
    _registered(tmp_path, parent.pids["child"])
    # A second, stale state file whose group id now belongs to a stranger:
    # same pid, another start time.
    stranger = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        started = start_time(stranger.pid)
        assert started is not None
        (tmp_path / "feedfacefeedface.state").write_text(
            "oma-bridge-supervisor 1\nowner feedfacefeedface\nwatchdog 999999999 1\n"
            f"+{stranger.pid} {started + 1}\n"
        )
        assert reap_leftovers(tmp_path) == 1  # the stale file, not the live daemon's
        time.sleep(0.2)
        assert stranger.poll() is None
        assert not wait_gone(parent.tree, within=0.2)
        assert len(list(tmp_path.glob("*.state"))) == 1
    finally:
        stranger.kill()
        stranger.wait()


def test_clean_watchdog_stop_removes_its_state_file(tmp_path: Path) -> None:
    async def main() -> Supervisor:
        supervisor = Supervisor(state_dir=tmp_path)
        process = await supervisor.spawn(["true"], stdin=False)
        await process.wait()
        await process.stop(1.0)
        return supervisor

    supervisor = anyio.run(main)
    assert supervisor.watchdog_pid is not None
    _registered(tmp_path, supervisor.watchdog_pid, line="watchdog ")
    supervisor.close()
    assert list(tmp_path.glob("*.state")) == []


async def test_stop_closing_stdin_first_lets_a_well_behaved_agent_leave() -> None:
    supervisor = Supervisor()
    try:
        process = await supervisor.spawn(["cat"])
        assert process.stdin is not None
        await process.stdin.send(b"bye")
        assert await process.stdout.receive() == b"bye"
        started = anyio.current_time()
        await process.stop(5.0, close_stdin_first=True)
        assert anyio.current_time() - started < 1.0  # no SIGTERM needed
        assert process.returncode == 0
    finally:
        supervisor.close()


async def test_stop_escalates_to_sigkill_and_drains_stderr_throughout() -> None:
    supervisor = Supervisor()
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "sys.stderr.write('x' * 1_000_000 + ' token=abc end')\n"
        "sys.stderr.flush()\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    try:
        process = await supervisor.spawn([sys.executable, "-c", code], stderr_tail_bytes=20)
        # Nobody reads stderr here: the loop drains it, or the child would block.
        with anyio.fail_after(10):
            received = b""
            while not received.endswith(b"\n"):
                received += await process.stdout.receive()
            assert received == b"ready\n"
            while not process.stderr.text().endswith("end"):  # noqa: ASYNC110 (a poll)
                await anyio.sleep(0.01)
        assert process.stderr.text() == "xxxxxx token=[redacted] end"
        started = anyio.current_time()
        await process.stop(0.6, close_stdin_first=True)
        # Half the grace after EOF, the other half after SIGTERM, then SIGKILL.
        assert 0.6 <= anyio.current_time() - started < 0.6 + 2.0
        assert process.returncode == -signal.SIGKILL
    finally:
        supervisor.close()


async def test_a_dead_watchdog_is_replaced_and_still_guards() -> None:
    supervisor = Supervisor()
    try:
        first = await supervisor.spawn(["sleep", "30"], stdin=False)
        old = supervisor.watchdog_pid
        assert old is not None
        os.kill(old, signal.SIGKILL)
        assert wait_gone([old], within=2.0)
        second = await supervisor.spawn(["sleep", "30"], stdin=False)  # notices the EPIPE
        new = supervisor.watchdog_pid
        assert new not in (None, old)
        assert psutil.pid_exists(new or 0)
        # Both groups are registered with the new watchdog: its EOF ends them.
        supervisor.close()
        assert wait_gone([first.pid, second.pid, new or 0], within=3.0)
        await first.stop(0.5)
        await second.stop(0.5)
    finally:
        supervisor.close()


def test_the_state_file_stays_small_under_steady_traffic(tmp_path: Path) -> None:
    from oma_bridge.supervision import watchdog as _watchdog

    state = tmp_path / "cafe.state"
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    sentinel = subprocess.Popen(["sleep", "30"], start_new_session=True)
    # The supervisor creates the state file and hands it to the watchdog open.
    fd = os.open(state, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    watchdog = subprocess.Popen(
        [sys.executable, "-I", "-S", _watchdog.__file__, "cafe", str(state), str(fd)],
        stdin=subprocess.PIPE,
        pass_fds=(fd,),
    )
    os.close(fd)
    try:
        assert watchdog.stdin is not None
        # 3,000 short runs of one group, then it stays; the sentinel marks the end.
        watchdog.stdin.write(f"+{sleeper.pid}\n-{sleeper.pid}\n".encode() * 3000)
        watchdog.stdin.write(f"+{sleeper.pid}\n+{sentinel.pid}\n".encode())
        watchdog.stdin.flush()
        _registered(tmp_path, sentinel.pid)
        lines = state.read_text().splitlines()
        assert len(lines) < 3000
        assert lines[-2:] == [
            f"+{sleeper.pid} {start_time(sleeper.pid)}",
            f"+{sentinel.pid} {start_time(sentinel.pid)}",
        ]
        watchdog.stdin.close()  # as if we died: the registered group goes
        assert watchdog.wait(timeout=5) == 0
        assert sleeper.wait(timeout=5) == -signal.SIGKILL
        assert sentinel.wait(timeout=5) == -signal.SIGKILL
        assert not state.exists()
    finally:
        kill_all([sleeper.pid, sentinel.pid, watchdog.pid])
        for process in (sleeper, sentinel, watchdog):
            process.wait()


def test_configure_supervisor_installs_the_daemons_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOME_PROVIDER_KEY", "sk-secret")
    configured = configure_supervisor(state_dir=tmp_path, hidden_variables={"SOME_PROVIDER_KEY"})

    async def one_child() -> None:
        process = await configured.spawn(["sleep", "30"], stdin=False)
        _registered(tmp_path, process.pid)
        await process.stop(0.5)

    try:
        assert default_supervisor() is configured
        assert "SOME_PROVIDER_KEY" not in configured.child_environment()
        anyio.run(one_child)
    finally:
        configure_supervisor()  # a plain default again, for the tests that follow
    assert list(tmp_path.glob("*.state")) == []  # closed: it had no child left


async def test_a_native_cancel_that_pierces_the_shield_still_ends_the_tree() -> None:
    # asyncio's task.cancel() is not anyio's: it pierces a shielded scope.
    # stop() then skips the rest of its grace, but never leaves the tree alive.
    supervisor = Supervisor()
    tree = [sys.executable, str(AGENTS / "proc_tree.py"), "--ignore-term"]
    try:
        process = await supervisor.spawn(tree, stdin=False)
        received = b""
        with anyio.fail_after(10):
            while received.count(b"\n") < 2:
                received += await process.stdout.receive()
        pids = [int(line.split()[1]) for line in received.decode().splitlines()]

        async def stop_shielded() -> None:
            with anyio.CancelScope(shield=True):
                await process.stop(30.0)

        task = asyncio.get_running_loop().create_task(stop_shielded())
        await anyio.sleep(0.2)  # inside the SIGTERM grace, which they ignore
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert wait_gone(pids, within=2.0)
    finally:
        kill_all(pids)
        supervisor.close()


def test_describe_exit_words_codes_and_signals() -> None:
    assert describe_exit(0) == "exited with code 0"
    assert describe_exit(7) == "exited with code 7"
    assert describe_exit(-signal.SIGTERM) == "exited with signal SIGTERM"
    assert describe_exit(-signal.SIGKILL) == "exited with signal SIGKILL"
    # signal.Signals() has no member for these: they must not raise.
    assert describe_exit(-(signal.SIGRTMIN + 3)) == "exited with signal SIGRTMIN+3"
    assert describe_exit(-(signal.SIGRTMIN - 1)) == f"exited with signal {signal.SIGRTMIN - 1}"
    assert exit_parts(3) == (3, None)
    assert exit_parts(-signal.SIGINT) == (None, "SIGINT")


async def _tree(
    supervisor: Supervisor, *flags: str, labels: dict[str, str]
) -> tuple[SupervisedProcess, dict[str, int]]:
    """``proc_tree.py`` spawned, once its child and grandchild both run."""
    argv = [sys.executable, str(AGENTS / "proc_tree.py"), *flags]
    process = await supervisor.spawn(argv, stdin=False, labels=labels)
    received = b""
    with anyio.fail_after(10):
        while len(pids := tree_pids(received.decode())) < 2:
            received += await process.stdout.receive()
    return process, pids


async def test_labels_stay_on_the_handle_and_list_the_whole_tree() -> None:
    supervisor = Supervisor()
    pids: list[int] = []
    try:
        plain, plain_pids = await _tree(supervisor, labels={"agentId": "a1"})
        escaped, escaped_pids = await _tree(
            supervisor, "--escape", labels={"agentId": "a2", "runId": "r2"}
        )
        unlabelled = await supervisor.spawn(["sleep", "30"], stdin=False)
        pids = [*plain_pids.values(), *escaped_pids.values(), unlabelled.pid]
        assert plain.labels == {"agentId": "a1"}
        with pytest.raises(TypeError):
            plain.labels["agentId"] = "changed"  # type: ignore[index]
        assert unlabelled.labels == {}
        environ = psutil.Process(plain.pid).environ()
        assert TAG_VARIABLE in environ and "a1" not in environ.values()

        listed = await supervisor.processes()
        by_pid = {pid: dict(labels) for pid, labels, _ in listed}
        # proc_tree.py's "child" is the spawned process itself.
        assert by_pid == {
            plain_pids["child"]: {"agentId": "a1"},
            plain_pids["grandchild"]: {"agentId": "a1"},
            escaped_pids["child"]: {"agentId": "a2", "runId": "r2"},
            escaped_pids["grandchild"]: {"agentId": "a2", "runId": "r2"},  # left the group
            unlabelled.pid: {},
        }
        assert [pid for pid, _, _ in listed][:2] == [plain.pid, plain_pids["grandchild"]]
        assert all(rss > 0 for _, _, rss in listed)
        # The resident sets are what psutil reads (the children sleep: they hold still).
        assert {pid: rss for pid, _, rss in listed} == {
            pid: psutil.Process(pid).memory_info().rss for pid, _, _ in listed
        }
        assert supervisor.processes_now() == listed  # a small scan: on the caller's thread

        await plain.stop(0.5)
        assert {pid for pid, _, _ in await supervisor.processes()} == {
            *escaped_pids.values(),
            unlabelled.pid,
        }
        await escaped.stop(0.5)
        await unlabelled.stop(0.5)
        assert await supervisor.processes() == []
    finally:
        kill_all(pids)
        supervisor.close()


async def test_merge_stderr_interleaves_stderr_with_stdout() -> None:
    supervisor = Supervisor()
    code = (
        "import sys\n"
        "for stream, text in ((sys.stdout, 'out1 '), (sys.stderr, 'err '), (sys.stdout, 'out2')):\n"
        "    stream.write(text)\n"
        "    stream.flush()\n"
    )
    try:
        process = await supervisor.spawn(
            [sys.executable, "-c", code], stdin=False, merge_stderr=True
        )
        with anyio.fail_after(10):
            received = b"".join([chunk async for chunk in process.stdout])
            assert await process.wait() == 0
        assert received == b"out1 err out2"
        assert process.stderr.text() == ""
        await process.stop(0.5)
    finally:
        supervisor.close()
