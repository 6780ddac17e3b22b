"""Cancel, crash, EOF and close: no turn hangs and no process survives."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import anyio
import psutil
import pytest

from oma_bridge import observe
from oma_bridge.backends import PermissionRequest
from oma_bridge.backends.acp import AcpBackend
from oma_bridge.errors import BackendError, RunTimeoutError

from .helpers import (
    AGENTS,
    Recorder,
    alive,
    context,
    fault_config,
    group_alive,
    run_text,
    scenario_config,
)

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]


async def _cancel_when(backend: AcpBackend, text: str, recorder: Recorder, seen: str) -> None:
    """Run ``text`` and cancel it once a text event containing ``seen`` arrived."""

    async with anyio.create_task_group() as group:

        async def emit_and_watch(event: object) -> None:
            await recorder(event)  # type: ignore[arg-type]
            if seen in "".join(recorder.of("text")):
                group.cancel_scope.cancel()

        ctx = context(text, recorder)
        ctx.emit = emit_and_watch
        await backend.run(ctx)
        pytest.fail("the run was not cancelled")


async def test_pre_cancelled_run_never_spawns(tmp_path: Path) -> None:
    backend = AcpBackend(scenario_config(tmp_path), agent_name="coder")
    with anyio.CancelScope() as scope:
        scope.cancel()
        await run_text(backend, "echo hi")
    assert backend.pid is None
    await backend.aclose()


async def test_cancel_mid_stream_keeps_the_session(tmp_path: Path) -> None:
    backend = AcpBackend(scenario_config(tmp_path), agent_name="coder")
    try:
        recorder = Recorder()
        with anyio.fail_after(20):
            await _cancel_when(backend, "slow", recorder, "started")
        assert recorder.of("text")[0] == "started"
        session, pid = backend.session_id, backend.pid
        assert session is not None
        # The agent answered `cancelled` in time: same process, same session.
        outcome, _ = await run_text(backend, "whoami")
        assert backend.pid == pid
        assert outcome.output.startswith(f"session={session} how=new turns=2")
    finally:
        await backend.aclose()


async def test_cancel_answers_a_pending_permission_request(tmp_path: Path) -> None:
    asked = anyio.Event()

    async def never_answers(request: PermissionRequest) -> str | None:
        asked.set()
        await anyio.sleep_forever()
        return None

    backend = AcpBackend(scenario_config(tmp_path), agent_name="coder")
    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:

                async def run() -> None:
                    await run_text(backend, "hang", permission_handler=never_answers)

                group.start_soon(run)
                await asked.wait()
                group.cancel_scope.cancel()
        # The agent saw `cancelled` and ended its turn: the process lives on.
        pid = backend.pid
        assert pid is not None
        outcome, _ = await run_text(backend, "echo after")
        assert outcome.output == "echo after" and backend.pid == pid
    finally:
        await backend.aclose()


async def test_cancel_ignored_by_agent_ends_tree_and_next_run_respawns(tmp_path: Path) -> None:
    config = scenario_config(tmp_path, cancel_grace_s=0.5)
    backend = AcpBackend(config, agent_name="coder")
    try:
        recorder = Recorder()
        with anyio.fail_after(20):
            await _cancel_when(backend, "stubborn", recorder, "never")
        assert backend.pid is None
        outcome, _ = await run_text(backend, "whoami")
        # Respawned, and the old session was loaded (the agent advertises loadSession).
        assert re.match(r"session=s\d+-1 how=load turns=1", outcome.output)
    finally:
        await backend.aclose()


async def test_crash_mid_turn_then_a_successful_run(tmp_path: Path) -> None:
    backend = AcpBackend(scenario_config(tmp_path), agent_name="coder")
    try:
        await run_text(backend, "echo warm up")
        session = backend.session_id
        with pytest.raises(BackendError) as info:
            await run_text(backend, "crash")
        message = info.value.message
        assert message.startswith('ACP agent "coder" exited with code 3: ')
        assert "fatal: boom" in message and "hunter2" not in message
        outcome, _ = await run_text(backend, "whoami")
        assert outcome.output.startswith(f"session={session} how=load turns=1")
    finally:
        await backend.aclose()


async def test_stdout_eof_mid_turn_fails_the_run(tmp_path: Path) -> None:
    backend = AcpBackend(fault_config(tmp_path, "acp_fault_agent.py", "eof"), agent_name="f")
    try:
        with anyio.fail_after(20), pytest.raises(BackendError, match="closed its stdout"):
            await run_text(backend, "go")
        assert backend.pid is None
    finally:
        await backend.aclose()


async def test_agent_ignoring_eof_and_sigterm_is_gone_after_close(tmp_path: Path) -> None:
    backend = AcpBackend(fault_config(tmp_path, "acp_fault_agent.py", "immortal"), agent_name="f")
    outcome, _ = await run_text(backend, "go")
    assert outcome.output == "ok from immortal"
    pid = backend.pid
    assert pid is not None
    tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    assert len(tree) == 2
    with anyio.fail_after(10):
        await backend.aclose()
    assert not group_alive(pid)
    assert not any(alive(p.pid) for p in tree)


async def test_profile_timeout_cancels_the_turn(tmp_path: Path) -> None:
    # The limit times turns, not the agent's start: on a loaded machine starting the
    # scenario agent alone took 2-6 s, so it is started (and its session opened) first,
    # by a session request, which no run's limit covers. 2 s, not less: the second run
    # must finish within the same profile limit (the first waits for the cancel anyway).
    backend = AcpBackend(scenario_config(tmp_path, timeout_s=2.0), agent_name="coder")
    try:
        await backend.session_request("session/set_mode", {"modeId": "default"})
        pid = backend.pid
        with pytest.raises(RunTimeoutError, match=r'"coder" exceeded whole-run timeout of 2000ms'):
            await run_text(backend, "slow")
        outcome, _ = await run_text(backend, "echo still here")
        assert outcome.output == "echo still here"
        assert backend.pid == pid, "the timeout cancelled the turn, not the agent"
    finally:
        await backend.aclose()


async def test_no_agent_process_survives_a_sigkilled_host(tmp_path: Path) -> None:
    host = await anyio.open_process(
        [
            sys.executable,
            "-m",
            "tests.acp.host_process",
            str(AGENTS / "acp_fault_agent.py"),
            "immortal",
        ],
        cwd=str(REPO),
    )
    try:
        assert host.stdout is not None
        with anyio.fail_after(20):
            line = (await host.stdout.receive()).decode()
        pids = [int(p) for p in line.split()]
        assert len(pids) == 2  # the agent and its grandchild in another session
        assert all(alive(pid) for pid in pids)
        host.kill()
        await host.wait()
        with anyio.fail_after(10):
            while any(alive(pid) for pid in pids):  # noqa: ASYNC110 - foreign processes
                await anyio.sleep(0.05)
    finally:
        if host.returncode is None:
            host.kill()
        await host.aclose()


async def test_respawn_prefers_session_resume_when_advertised(tmp_path: Path) -> None:
    config = scenario_config(tmp_path, env={"ACP_TEST_RESUME": "1"})
    backend = AcpBackend(config, agent_name="coder")
    try:
        await run_text(backend, "echo first", system_prompt="Sys.")
        session = backend.session_id
        with pytest.raises(BackendError):
            await run_text(backend, "crash")
        outcome, _ = await run_text(backend, "whoami", system_prompt="Sys.")
        # Same session, resumed: the system prompt is not sent again.
        assert outcome.output == f"session={session} how=resume turns=1 model=None"
    finally:
        await backend.aclose()


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({"ACP_TEST_NO_LOAD": "1"}, "the agent advertises neither session/resume nor session/load"),
        ({"ACP_TEST_LOAD_FAILS": "1"}, "session/load failed with error -32002: no session"),
    ],
)
async def test_a_session_that_cannot_be_continued_is_reported_as_a_note(
    tmp_path: Path, env: dict[str, str], why: str
) -> None:
    notes: list[dict[str, object]] = []
    unsubscribe = observe.subscribe(
        lambda event, fields: notes.append(fields) if event == "note" else None
    )
    config = scenario_config(tmp_path, env=env, resume_session="s-old", labels={"agentId": "a1"})
    backend = AcpBackend(config, agent_name="coder")
    try:
        outcome, _ = await run_text(backend, "whoami")
        new, how, *_ = outcome.output.split()
        assert (new.startswith("session=s"), how) == (True, "how=new")
    finally:
        unsubscribe()
        await backend.aclose()
    [note] = notes
    assert note["agentId"] == "a1"
    text = str(note["text"])
    assert text.startswith('ACP agent "coder": its earlier session s-old could not be continued')
    assert why in text
    assert f"a new session {new.removeprefix('session=')} started" in text
    assert text.endswith("the agent does not remember the earlier turns")


async def test_a_continued_session_writes_no_note(tmp_path: Path) -> None:
    notes: list[str] = []
    unsubscribe = observe.subscribe(lambda event, fields: notes.append(event))
    backend = AcpBackend(scenario_config(tmp_path, resume_session="s-old"), agent_name="coder")
    try:
        outcome, _ = await run_text(backend, "whoami")
        assert outcome.output.startswith("session=s-old how=load turns=1")
    finally:
        unsubscribe()
        await backend.aclose()
    assert "note" not in notes


async def test_an_agent_that_died_while_idle_is_respawned_for_the_next_run(
    tmp_path: Path,
) -> None:
    backend = AcpBackend(scenario_config(tmp_path), agent_name="coder")
    try:
        await run_text(backend, "echo one")
        session, pid = backend.session_id, backend.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        with anyio.fail_after(5):
            while alive(pid):  # noqa: ASYNC110 - a foreign process: nothing to await
                await anyio.sleep(0.02)
        await anyio.sleep(0.1)  # let the event loop see the exit
        outcome, _ = await run_text(backend, "whoami")
        assert outcome.output.startswith(f"session={session} how=load turns=1")
        assert backend.pid != pid
    finally:
        await backend.aclose()


async def test_close_during_start_up_leaves_no_process(tmp_path: Path) -> None:
    marker = tmp_path / "slow"
    marker.touch()
    config = fault_config(
        tmp_path, "acp_fault_agent.py", "slowinit", env={"ACP_SLOW_INIT": str(marker)}
    )
    backend = AcpBackend(config, agent_name="f")
    errors: list[BaseException] = []
    async with anyio.create_task_group() as group:

        async def run() -> None:
            try:
                await run_text(backend, "go")
            except BackendError as exc:
                errors.append(exc)

        group.start_soon(run)
        with anyio.fail_after(10):
            while backend.pid is None:  # noqa: ASYNC110 - waiting for the spawn
                await anyio.sleep(0.01)
        pid = backend.pid
        with anyio.fail_after(10):
            await backend.aclose()
        assert not group_alive(pid)
    assert len(errors) == 1
    with pytest.raises(BackendError, match="is closed"):
        await run_text(backend, "go")
