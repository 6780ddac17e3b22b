"""The audit log records what agents did: spawns and exits, file writes and denials."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from oma_bridge import observe
from oma_bridge.client import connect

from .conftest import AGENTS, daemon

pytestmark = pytest.mark.anyio

SCENARIO = Path(__file__).resolve().parent.parent / "agents" / "acp_scenario_agent.py"


def records(folder: Path) -> list[dict[str, Any]]:
    path = folder / "state" / "audit.jsonl"
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def exited(folder: Path, agent_id: str) -> bool:
    return any(r["event"] == "exit" and r["agentId"] == agent_id for r in records(folder))


async def test_spawn_exit_and_file_events_name_the_agent(short_dir: Path) -> None:
    (short_dir / "work").mkdir()
    agents = (
        AGENTS
        + f"""
[agents.scenario]
kind = "acp"
command = "{sys.executable}"
args = ["{SCENARIO}"]
cwd = "{short_dir / "work"}"

[agents.refuser]
kind = "acp"
command = "{sys.executable}"
args = ["{SCENARIO}"]
permission = "reject"
"""
    )
    async with daemon(short_dir, agents=agents), connect(discovery_dir=short_dir) as client:
        counter = await client.open("wordcount")
        assert (await counter.run("one two")).success
        scenario = await client.open("scenario")
        target = short_dir / "work" / "note.txt"
        written = await scenario.run(f"fswrite {target} hello")
        assert written.output == "written", written.status
        denied = await scenario.run("fs /etc/hostname")
        assert denied.output.startswith("error:"), denied.output
        with anyio.fail_after(10):
            while not exited(short_dir, counter.agent_id):  # noqa: ASYNC110 (a file)
                await anyio.sleep(0.05)
        log = records(short_dir)
        spawn = next(r for r in log if r["event"] == "spawn" and r["agentId"] == counter.agent_id)
        assert (spawn["command"], spawn["profile"]) == ("wc", "wordcount")
        assert isinstance(spawn["pid"], int) and "T" in spawn["ts"]
        exit_ = next(r for r in log if r["event"] == "exit" and r["agentId"] == counter.agent_id)
        assert (exit_["pid"], exit_["returncode"]) == (spawn["pid"], 0)
        write = next(r for r in log if r["event"] == "fs_write")
        assert write["agentId"] == scenario.agent_id
        assert (write["path"], write["bytes"]) == (str(target.resolve()), 5)
        refusal = next(r for r in log if r["event"] == "fs_denied")
        assert refusal["agentId"] == scenario.agent_id
        assert refusal["reason"] == "path is outside the agent's working directory"
        assert any(r["event"] == "spawn" and r["agentId"] == scenario.agent_id for r in log)
        # A profile's own policy decides too, and says so.
        refuser = await client.open("refuser")
        answered = await refuser.run("tools")
        assert answered.output.startswith("permission:r"), answered.output
        decision = next(
            r
            for r in records(short_dir)
            if r["event"] == "permission" and r["agentId"] == refuser.agent_id
        )
        assert decision["decidedBy"] == "policy"
        assert decision["outcome"]["outcome"] == "selected"


async def test_every_observer_sees_the_agent_id_the_audit_log_records(short_dir: Path) -> None:
    """``observe.report`` hands each observer its own fields: the daemon's audit
    observer reading ``agentId`` (and adding the profile) takes nothing from
    an observer subscribed after it."""
    seen: list[tuple[str, dict[str, Any]]] = []
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        unsubscribe = observe.subscribe(lambda event, fields: seen.append((event, fields)))
        try:
            counter = await client.open("wordcount")
            assert (await counter.run("one two")).success
            with anyio.fail_after(10):
                while not exited(short_dir, counter.agent_id):  # noqa: ASYNC110 (a file)
                    await anyio.sleep(0.05)
        finally:
            unsubscribe()
        spawn = next(r for r in records(short_dir) if r["event"] == "spawn")
        assert (spawn["agentId"], spawn["profile"]) == (counter.agent_id, "wordcount")
    spawns = [fields for event, fields in seen if event == "spawn"]
    exits = [fields for event, fields in seen if event == "exit"]
    assert spawns and exits
    assert all(fields["agentId"] == counter.agent_id for fields in spawns + exits)
    # What the audit observer added for its record is not in the library's report.
    assert all("profile" not in fields for fields in spawns)
