"""The ACP backend against a real agent on the official SDK: the happy paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from oma_bridge.backends.acp import AcpBackend
from oma_bridge.errors import BackendError

from .helpers import group_alive, run_text, scenario_config

pytestmark = pytest.mark.anyio


async def test_happy_path_text_usage_and_clean_close(tmp_path: Path) -> None:
    backend = AcpBackend(scenario_config(tmp_path), agent_name="coder")
    try:
        outcome, rec = await run_text(backend, "echo hello world")
        assert outcome.output == "echo hello world"
        assert rec.of("text") == ["echo hello world"]
        assert outcome.messages == [
            {"role": "assistant", "content": [{"type": "text", "text": "echo hello world"}]}
        ]
        assert outcome.token_usage.input_tokens == 160
        assert outcome.error is None and not outcome.cancelled
        pid = backend.pid
        assert pid is not None
    finally:
        await backend.aclose()
    assert not group_alive(pid)


async def test_two_runs_share_one_session_and_system_prompt_goes_first_only(
    tmp_path: Path,
) -> None:
    backend = AcpBackend(scenario_config(tmp_path), agent_name="coder")
    try:
        first, _ = await run_text(backend, "echo one", system_prompt="  Be brief.  ")
        assert first.output == "Be brief.\n\necho one"
        session = backend.session_id
        second, _ = await run_text(backend, "echo two", system_prompt="Be brief.")
        assert second.output == "echo two"
        assert backend.session_id == session
        who, _ = await run_text(backend, "whoami")
        assert who.output == f"session={session} how=new turns=3 model=None"
        # Telescoping: 160 after the first turn, then only the growth.
        assert first.token_usage.input_tokens == len("Be brief.\n\necho one") * 10
        assert second.token_usage.input_tokens == 0  # "echo two" is shorter: max(0, ...)
    finally:
        await backend.aclose()


async def test_empty_prompt_fails_before_spawn(tmp_path: Path) -> None:
    backend = AcpBackend(scenario_config(tmp_path), agent_name="coder")
    with pytest.raises(BackendError, match=r'^ACP backend "coder" received an empty prompt\.$'):
        await run_text(backend, "  \n ")
    assert backend.pid is None
    await backend.aclose()
