"""A key's value, printed by an agent, reaches nothing the daemon writes or answers (issue 22).

The keys have no recognisable prefix, so only their literal values can give
them away: one in a known provider variable, one an llm profile's
``api_key_env``, one only in a ``pass_env``.  An ACP agent given them prints
them as non-JSON lines on stdout (which the daemon logs) and on stderr, then
dies; a process agent prints them on stderr and fails (its status message,
the journal, the session file).  Then every answer and every file is read.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from oma_bridge.client import connect

from .harness import SCENARIO_AGENT, config_text, daemon_process

pytestmark = pytest.mark.anyio

KEYS = {
    "OPENAI_API_KEY": "Zq7vN2pL9wXc4RtY8mKd",
    "OMAB_LLM_KEY": "hT5uB3nQ8eW1yR6oP0aS",
    "OMAB_PASSED_KEY": "c4Vx9Lm2Nb7Kj5Hg3Fd8",
}
NAMES = " ".join(KEYS)
PASS_ENV = ", ".join(f'"{name}"' for name in KEYS)
PRINT_TO_STDERR = (
    "import os, sys\n"
    f"for name in {list(KEYS)!r}:\n"
    "    sys.stderr.write(f'{name}={os.environ[name]} loaded from {os.environ[name]}\\n')\n"
    "sys.exit(1)\n"
)
AGENTS = f"""
[agents.claude]
kind = "llm"
provider = "anthropic"
model = "m"
api_key_env = "OMAB_LLM_KEY"

[agents.coder]
kind = "acp"
command = "@python"
args = ["{SCENARIO_AGENT}"]
pass_env = [{PASS_ENV}]

[agents.tool]
kind = "process"
command = "@python"
args = ["-c", {orjson.dumps(PRINT_TO_STDERR).decode()}]
input = "none"
pass_env = [{PASS_ENV}]
"""


def found_keys(text: str) -> list[str]:
    return [name for name, value in KEYS.items() if value in text]


def files(folder: Path) -> dict[Path, str]:
    """Every file under ``folder`` (the daemon's log, state and runtime files), as text."""
    return {path: path.read_text(errors="replace") for path in folder.rglob("*") if path.is_file()}


async def test_a_printed_key_is_blanked_from_every_output(folder: Path) -> None:
    text = config_text(folder, agents=AGENTS)
    answers: list[Any] = []
    async with daemon_process(folder, text, env=KEYS) as daemon:
        async with connect(discovery_dir=folder) as client:
            coder = await client.open("coder")
            events = [event.to_wire() async for event in coder.stream(f"leak {NAMES}")]
            answers.append(events)
            tool = await client.open("tool")
            result = await tool.run("go")
            assert not result.success
            # The stderr reached the status message, blanked.
            assert "OMAB_PASSED_KEY=[redacted] loaded from [redacted]" in str(result.status)
            answers.append(result.to_wire())
            answers.append(await client.request("run/result", {"runId": result.run_id}))
            answers.append(await tool.history())
            answers.append(await client.status())
            answers.append(await client.request("daemon/audit", {}))
        # The non-JSON lines were logged, blanked.
        await daemon.wait_log("skipped a non-JSON line: [redacted]")
        daemon.signal(signal.SIGTERM)
        with anyio.fail_after(15):
            await daemon.process.wait()
    assert found_keys(orjson.dumps(answers).decode()) == []
    written = files(folder)
    sessions = [path for path in written if path.parent.name == "sessions"]
    assert sessions and any("[redacted]" in written[path] for path in sessions)
    assert any(path.name == "audit.jsonl" for path in written)
    for path, content in written.items():
        if path.name != "bridge.toml":  # the test's config names the variables, not the values
            assert found_keys(content) == [], path
