"""``terminal/*`` (opt-in): output limits at character boundaries, kill, release, cancel."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import anyio
import psutil
import pytest
from process.conftest import tree_pids

from oma_bridge.backends.acp import AcpBackend
from oma_bridge.backends.acp.terminal import acp_exit_status
from oma_bridge.errors import BackendError
from oma_bridge.supervision.supervisor import TAG_VARIABLE, default_supervisor

from .helpers import Recorder, alive, context, run_text, scenario_config

pytestmark = pytest.mark.anyio


async def _all_gone(pids: list[int], within: float = 5) -> None:
    with anyio.fail_after(within):
        while any(alive(pid) for pid in pids):  # noqa: ASYNC110 - foreign processes
            await anyio.sleep(0.05)


def _kill(pids: list[int]) -> None:
    """Clean-up of what the code under test failed to end."""
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()


async def test_terminal_output_is_truncated_at_a_character_boundary(tmp_path: Path) -> None:
    backend = AcpBackend(scenario_config(tmp_path, terminal=True), agent_name="coder")
    try:
        outcome, _ = await run_text(backend, "terminal 6")
        # "abééé!" is 9 bytes; the last 6 start inside an "é", so 5 are kept.
        assert outcome.output == "exit=4 output=éé! truncated=True"
        outcome, _ = await run_text(backend, "terminal 100")
        assert outcome.output == "exit=4 output=abééé! truncated=False"
        outcome, _ = await run_text(backend, "terminalkill")
        assert outcome.output == "signal=SIGKILL"
    finally:
        await backend.aclose()


async def test_terminal_off_by_default(tmp_path: Path) -> None:
    backend = AcpBackend(scenario_config(tmp_path), agent_name="coder")
    try:
        # The agent's terminal/create gets -32601 and it fails its turn with it.
        with pytest.raises(BackendError, match="-32601"):
            await run_text(backend, "terminal 6")
    finally:
        await backend.aclose()


async def test_cancel_kills_the_turns_terminals(tmp_path: Path) -> None:
    backend = AcpBackend(scenario_config(tmp_path, terminal=True), agent_name="coder")
    recorder = Recorder()
    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:

                async def watch(event: object) -> None:
                    await recorder(event)  # type: ignore[arg-type]
                    group.cancel_scope.cancel()

                ctx = context("terminalhang", recorder)
                ctx.emit = watch
                group.start_soon(backend.run, ctx)
        pid = int(recorder.of("text")[0].removeprefix("pid="))
        with anyio.fail_after(5):
            while alive(pid):  # noqa: ASYNC110 - a foreign process: nothing to await
                await anyio.sleep(0.05)
    finally:
        await backend.aclose()


def test_acp_exit_status_has_a_code_or_a_signal_name() -> None:
    assert acp_exit_status(0) == {"exitCode": 0, "signal": None}
    assert acp_exit_status(4) == {"exitCode": 4, "signal": None}
    assert acp_exit_status(-signal.SIGKILL) == {"exitCode": None, "signal": "SIGKILL"}
    realtime = -(signal.SIGRTMIN + 3)
    assert acp_exit_status(realtime) == {"exitCode": None, "signal": "SIGRTMIN+3"}


async def test_a_command_ended_by_a_real_time_signal_reports_its_name(tmp_path: Path) -> None:
    # signal.Signals(SIGRTMIN + 3) raises ValueError: this once failed the request.
    backend = AcpBackend(scenario_config(tmp_path, terminal=True), agent_name="coder")
    try:
        code = (
            "import os, signal; print('bye', flush=True); os.kill(os.getpid(), signal.SIGRTMIN + 3)"
        )
        with anyio.fail_after(20):
            outcome, _ = await run_text(backend, f"terminalrun {code}")
        assert outcome.output == "exit=None signal=SIGRTMIN+3 output=bye\n"
    finally:
        await backend.aclose()


@pytest.mark.parametrize("flags", ["--ignore-term", "--ignore-term --escape"])
async def test_terminal_kill_ends_the_commands_whole_tree(tmp_path: Path, flags: str) -> None:
    backend = AcpBackend(scenario_config(tmp_path, terminal=True), agent_name="coder")
    pids: list[int] = []
    try:
        with anyio.fail_after(20):
            outcome, _ = await run_text(backend, f"terminaltree kill {flags}")
        pids = list(tree_pids(outcome.output).values())
        assert len(pids) == 2, outcome.output
        assert outcome.output.endswith("signal=SIGKILL")
        # The grandchild too, even one that left the group (``--escape``).
        await _all_gone(pids)
    finally:
        await backend.aclose()
        _kill(pids)


async def test_terminals_are_supervised_children_with_the_agents_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMA_BRIDGE_TOKEN", "t" * 64)
    monkeypatch.setenv("NOTIFY_SOCKET", "@omab-test-notify")
    labels = {"agentId": "agt_terminal"}
    config = scenario_config(tmp_path, terminal=True, labels=labels)
    backend = AcpBackend(config, agent_name="coder")
    recorder = Recorder()
    pids: dict[str, int] = {}
    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:
                group.start_soon(backend.run, context("terminaltree hang --escape", recorder))
                while len(pids := tree_pids("".join(recorder.of("text")))) < 2:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
                listed = {pid: dict(of) for pid, of, _ in await default_supervisor().processes()}
                environ = psutil.Process(pids["child"]).environ()
                agent_pid = backend.pid
                group.cancel_scope.cancel()  # a turn cancel ends the turn's terminals
        assert agent_pid is not None
        assert listed[agent_pid] == labels
        assert listed[pids["child"]] == labels
        assert listed[pids["grandchild"]] == labels  # escaped from the group, found by its tag
        assert environ[TAG_VARIABLE].startswith(default_supervisor().owner + ".")
        assert "OMA_BRIDGE_TOKEN" not in environ and "NOTIFY_SOCKET" not in environ
        assert "agt_terminal" not in str(environ)  # labels stay out of the environment
        await _all_gone(list(pids.values()))
    finally:
        await backend.aclose()
        _kill(list(pids.values()))


async def test_closing_the_agent_ends_its_terminals(tmp_path: Path) -> None:
    backend = AcpBackend(scenario_config(tmp_path, terminal=True), agent_name="coder")
    recorder = Recorder()
    pids: dict[str, int] = {}
    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:

                async def run() -> None:
                    with contextlib.suppress(BackendError):  # the agent is closed under the turn
                        await backend.run(context("terminaltree hang --ignore-term", recorder))

                group.start_soon(run)
                while len(pids := tree_pids("".join(recorder.of("text")))) < 2:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
                agent_pid = backend.pid
                await backend.aclose()
        assert agent_pid is not None
        await _all_gone([agent_pid, *pids.values()])
    finally:
        await backend.aclose()
        _kill(list(pids.values()))
