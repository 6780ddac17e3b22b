"""A daemon killed mid-session finds the worktree again; ``oma-bridge worktrees [--prune]``.

The daemon is a subprocess (``oma-bridge serve``) on
``$XDG_RUNTIME_DIR/oma-bridge/``, so the CLI finds it as a user's shell
would.  An agent of a ``cwd = "worktree"`` profile edits its worktree, the
daemon is SIGKILLed, a new one starts on the same state folder: the agent
resumed by id runs in the same worktree, its edit still there.  The CLI
lists the worktrees with their agent's state and changes, and ``--prune``
removes the unchanged one of an agent that is gone and nothing else.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import anyio
import pytest
from lifecycle.harness import config_text, daemon_process

from isolation.gitrepo import branches, make_repository
from oma_bridge.client import connect
from oma_bridge.isolation import Worktrees

pytestmark = pytest.mark.anyio

EDITOR = """
while read -r verb name text || [ -n "$verb" ]; do
  if [ "$verb" = edit ]; then printf '%s\\n' "$text" > "$name"; fi
done
pwd
"""


def profiles(roots: Path) -> tuple[str, str]:
    server = f'workspace_roots = ["{roots}"]'
    agents = f"""
[agents.coder]
kind = "process"
command = "sh"
args = ["-c", {json.dumps(EDITOR)}]
cwd = "worktree"
"""
    return server, agents


def run_written(session: Path) -> bool:
    return session.exists() and b'"run_end"' in session.read_bytes()


def gone(path: Path) -> bool:
    return not path.exists()


async def cli(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    with anyio.fail_after(30):
        done = await anyio.run_process(
            [sys.executable, "-m", "oma_bridge.cli", *args], env=env, check=False
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_a_killed_daemon_resumes_in_the_worktree_and_the_cli_lists_and_prunes(
    folder: Path,
) -> None:
    runtime = folder / "run"
    home = runtime / "oma-bridge"
    home.mkdir(parents=True, mode=0o700)
    repository, base = make_repository(folder / "repo")
    text = config_text(home, *profiles(folder))
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "XDG_STATE_HOME": str(home / "state")}
    async with daemon_process(home, text) as first, connect(discovery_dir=home) as client:
        agent = await client.open("coder", cwd=str(repository))
        assert agent.worktree is not None
        tree = Path(agent.worktree["path"])
        result = await agent.run("edit wip.txt half done")
        assert result.output.strip() == str(tree)
        # Mid-session, once its writer has the run (fsynced at each run's end, docs/sessions.md).
        session = home / "state" / "oma-bridge" / "sessions" / f"{agent.agent_id}.jsonl"
        with anyio.fail_after(10):
            while not run_written(session):  # noqa: ASYNC110 (a poll of another process's file)
                await anyio.sleep(0.02)
        first.signal(signal.SIGKILL)
        with anyio.fail_after(10):
            await first.process.wait()
    assert (tree / "wip.txt").read_text() == "half done\n"

    async with daemon_process(home, text), connect(discovery_dir=home) as client:
        resumed = await client.open("coder", resume=agent.agent_id)
        assert resumed.worktree == agent.worktree
        result = await resumed.run("look")
        assert result.success and result.output.strip() == str(tree)
        assert (tree / "wip.txt").read_text() == "half done\n"

        # What a daemon that died without its sessions leaves: an unchanged orphan.
        orphan = await Worktrees(home / "state" / "oma-bridge" / "worktrees").create(
            "agt_orphan", repository
        )
        code, out, err = await cli(env, "worktrees")
        assert code == 0, err
        lines = out.splitlines()
        assert lines[0].split() == [
            "AGENT",
            "ID",
            "PROFILE",
            "AGENT",
            "BRANCH",
            "BASE",
            "CHANGES",
            "PATH",
        ]
        by_id = {line.split()[0]: line for line in lines[1:]}
        assert "open" in by_id[agent.agent_id] and "1 changed file" in by_id[agent.agent_id]
        assert str(tree) in by_id[agent.agent_id] and base[:12] in by_id[agent.agent_id]
        assert "gone" in by_id["agt_orphan"] and "unchanged" in by_id["agt_orphan"]

        code, out, err = await cli(env, "worktrees", "--prune")
        assert code == 0, err
        assert out.startswith("removed 1 worktree(s) with their branches\n"), out
        assert "agt_orphan" in out.split("kept")[0] and agent.agent_id in out.split("kept")[1]
        assert gone(orphan.path) and not gone(tree)
        assert branches(repository) == sorted(["main", f"oma/{agent.agent_id}"])
        await resumed.close()
    assert not gone(tree)  # changed: kept, with its branch
    assert branches(repository) == sorted(["main", f"oma/{agent.agent_id}"])
