"""``terminal/*`` (opt-in): output limits at character boundaries, kill, release, cancel."""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import pytest

from oma_bridge.backends.acp import AcpBackend
from oma_bridge.backends.acp.terminal import acp_exit_status
from oma_bridge.errors import BackendError

from .helpers import Recorder, alive, context, run_text, scenario_config

pytestmark = pytest.mark.anyio


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
