"""``terminal/*`` (opt-in): output limits at character boundaries, kill, release, cancel."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from oma_bridge.backends.acp import AcpBackend
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
