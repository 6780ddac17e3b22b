"""Sessions across restarts (PROTOCOL.md §13.4): a real ``oma-bridge serve``, stopped and started.

The daemon runs with ``XDG_STATE_HOME=<folder>/state``, so its sessions are
in ``<folder>/state/oma-bridge/sessions/``.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from support.wire import wire_client

from oma_bridge.client import DaemonError, connect

from .harness import config_text, daemon_process, wait_all_gone

pytestmark = pytest.mark.anyio

AGENTS = f"""
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"

[agents.sleeper]
kind = "process"
command = "{sys.executable}"
args = ["-c", "import time; print('started', flush=True); time.sleep(60)"]
input = "none"
"""


def sessions_dir(folder: Path) -> Path:
    return folder / "state" / "oma-bridge" / "sessions"


async def journal_of(folder: Path, agent_id: str) -> list[tuple[int, dict[str, Any]]]:
    """Every retained entry of the agent: what ``agent/watch afterSeq 0`` sends first."""
    async with wire_client(folder / "bridge.sock") as wire:
        answer = await wire.call("agent/watch", {"agentId": agent_id, "afterSeq": 0})
        notes = wire.notes[: answer["notesBefore"]]
    assert notes[-1]["params"]["seq"] == answer["result"]["seq"]
    return [(note["params"]["seq"], note["params"]["entry"]) for note in notes]


async def test_sigterm_and_start_again_resumes_history_and_journal(folder: Path) -> None:
    text = config_text(folder, "", AGENTS)
    with anyio.fail_after(60):
        async with daemon_process(folder, text) as first:
            async with connect(discovery_dir=folder) as client:
                agent = await client.open("echo")
                assert (await agent.prompt("alpha beta")).output == "alpha beta"
                assert (await agent.prompt("gamma delta epsilon")).output == "gamma delta epsilon"
                history = await agent.history()
                journal = await journal_of(folder, agent.agent_id)
            first.signal(signal.SIGTERM)
            assert await first.process.wait() == 0
        assert [p.name for p in sessions_dir(folder).iterdir()] == [f"{agent.agent_id}.jsonl"]
        assert len(journal) == 4 + 5  # per prompt: run_start, a text event per word, run_end

        async with daemon_process(folder, text) as second:
            async with connect(discovery_dir=folder) as client:
                assert (await client.status())["sessions"] == 1
                with pytest.raises(DaemonError) as not_yet:  # not open until resumed
                    await client.request("agent/history", {"agentId": agent.agent_id})
                assert not_yet.value.rpc_code == -32011
                answer = await client.request(
                    "agent/open", {"profile": "echo", "resume": agent.agent_id}
                )
                assert answer == {"agentId": agent.agent_id}
                resumed = await client.attach(agent.agent_id, profile="echo")
                assert await resumed.history() == history
                assert await journal_of(folder, agent.agent_id) == journal
                # Echo answers the last user message only, but counts every word it read.
                result = await resumed.prompt("zeta")
                assert result.output == "zeta"
                assert result.token_usage.input_tokens == 2 + 2 + 3 + 3 + 1
                assert len(await resumed.history()) == 6
                # The journal goes on after the entries it had.
                after = await journal_of(folder, agent.agent_id)
                assert after[: len(journal)] == journal
                assert [seq for seq, _ in after] == list(range(1, len(journal) + 4))
                assert (await client.status())["sessions"] == 1
                # A second resume of a live agent reattaches; another profile is refused.
                with pytest.raises(DaemonError) as wrong:
                    await client.request(
                        "agent/open", {"profile": "sleeper", "resume": agent.agent_id}
                    )
                assert wrong.value.rpc_code == -32602
            second.signal(signal.SIGTERM)
            assert await second.process.wait() == 0


FORGETFUL = f"""
[agents.forgetful]
kind = "acp"
command = "{sys.executable}"
args = ["{Path(__file__).parents[1] / "agents" / "acp_scenario_agent.py"}"]
env = {{ ACP_TEST_NO_LOAD = "1" }}
"""


async def test_an_acp_session_that_cannot_be_continued_says_so_in_the_journal(
    folder: Path,
) -> None:
    # The agent advertises neither session/resume nor session/load.
    text = config_text(folder, "", FORGETFUL)
    with anyio.fail_after(60):
        async with daemon_process(folder, text) as first:
            async with connect(discovery_dir=folder) as client:
                agent = await client.open("forgetful")
                before = (await agent.prompt("whoami")).output
                assert "how=new turns=1" in before
                journal = await journal_of(folder, agent.agent_id)
            first.signal(signal.SIGTERM)
            assert await first.process.wait() == 0

        async with daemon_process(folder, text) as second:
            async with connect(discovery_dir=folder) as client:
                await client.request(
                    "agent/open", {"profile": "forgetful", "resume": agent.agent_id}
                )
                resumed = await client.attach(agent.agent_id, profile="forgetful")
                after = (await resumed.prompt("whoami")).output
                last = journal[-1][0]
                async with contextlib.aclosing(resumed.watch(after_seq=last)) as entries:
                    kinds = []
                    async for entry in entries:  # a watcher gets the note as an agent/event
                        kinds.append(entry.entry["type"])
                        if entry.entry["type"] == "note":
                            note = entry
                        if entry.entry["type"] == "run_end":
                            break
                assert kinds == ["run_start", "note", "event", "run_end"]
                watched = await journal_of(folder, agent.agent_id)
            second.signal(signal.SIGTERM)
            assert await second.process.wait() == 0
    # A new downstream session, which the agent's answer and the note both say.
    assert "how=new turns=1" in after and after.split()[0] != before.split()[0]
    downstream = before.split()[0].removeprefix("session=")
    assert note.entry == {"type": "note", "text": note.entry["text"]}
    assert note.entry["text"].startswith(
        f'ACP agent "forgetful": its earlier session {downstream} could not be continued '
        "(the agent advertises neither session/resume nor session/load); a new session "
    )
    # After the journal read back: the note in its place, in the session file too.
    assert watched[: len(journal)] == journal
    assert watched[len(journal) + 1] == (note.seq, note.entry)
    assert '"type":"note"' in (sessions_dir(folder) / f"{agent.agent_id}.jsonl").read_text()


async def test_sigkill_mid_run_records_the_run_as_ended_and_leaves_nothing_running(
    folder: Path,
) -> None:
    text = config_text(folder, "", AGENTS)
    with anyio.fail_after(60):
        async with daemon_process(folder, text) as first, connect(discovery_dir=folder) as client:
            agent = await client.open("sleeper")
            params = {"agentId": agent.agent_id, "input": "x", "runId": "r-killed"}
            await client.peer.start_request("agent/stream", params)
            with anyio.fail_after(10):
                while not (await client.status())["processes"]:  # noqa: ASYNC110 (a poll)
                    await anyio.sleep(0.02)
            tree = first.descendants()
            sleepers = [p for p in tree if "time.sleep(60)" in " ".join(p.cmdline())]
            assert sleepers
            first.signal(signal.SIGKILL)
            await first.process.wait()

        async with daemon_process(folder, text):
            # Nothing of the run still runs (the watchdog or the start-up reaper ended it).
            assert await wait_all_gone(sleepers, within=10) == []
            async with connect(discovery_dir=folder) as client:
                for _attempt in ("before resume", "after resume"):
                    result = await client.request("run/result", {"runId": "r-killed"})
                    assert result["status"] == {
                        "code": "error",
                        "message": "daemon stopped during the run",
                    }
                    assert result["success"] is False
                    await client.request(
                        "agent/open", {"profile": "sleeper", "resume": agent.agent_id}
                    )
                watched = await journal_of(folder, agent.agent_id)
                assert watched[0][1]["type"] == "run_start"
                assert watched[-1][1]["type"] == "run_end"
                assert watched[-1][1]["runId"] == "r-killed"
                status = await client.status()
                assert status["runs"] == [] and status["processes"] == []
    assert all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in sleepers)


async def test_corrupt_session_files_are_skipped_by_name_and_the_daemon_serves(
    folder: Path,
) -> None:
    sessions = sessions_dir(folder)
    for level in (sessions.parent.parent, sessions.parent, sessions):
        level.mkdir(mode=0o700)  # as the daemon makes them: a state folder must be private
    header = b'{"v":1,"agentId":"agt_truncated","profile":"echo","overrides":{},"createdAt":1}\n'
    truncated = sessions / "agt_truncated.jsonl"
    truncated.write_bytes(header + b'{"seq":1,"entry":{"type":"run_st')
    garbage = sessions / "agt_garbage.jsonl"
    garbage.write_bytes(b"\x00\xff\xfe not json at all \x89PNG\r\n")
    good = sessions / "agt_good.jsonl"
    good.write_bytes(header.replace(b"agt_truncated", b"agt_good"))
    text = config_text(folder, "", AGENTS)
    with anyio.fail_after(30):
        async with daemon_process(folder, text) as daemon:
            await daemon.wait_log(f"skipping the session file {garbage}")
            await daemon.wait_log(f"skipping the session file {truncated}")
            async with connect(discovery_dir=folder) as client:
                agent = await client.open("echo")
                assert (await agent.run("still serving")).output == "still serving"
                for broken in ("agt_truncated", "agt_garbage"):
                    with pytest.raises(DaemonError) as caught:
                        await client.request("agent/open", {"profile": "echo", "resume": broken})
                    assert caught.value.rpc_code == -32011
                resumed = await client.request(
                    "agent/open", {"profile": "echo", "resume": "agt_good"}
                )
                assert resumed == {"agentId": "agt_good"}
            assert "Traceback" not in daemon.log()
