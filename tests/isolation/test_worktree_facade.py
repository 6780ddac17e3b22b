"""Worktree sessions through the ACP facade, on the official Python SDK's client (PROTOCOL §19.2).

A real ``oma-bridge serve``, the shim, ``sdk_client.py`` and an ACP agent on
the Python SDK (``tests/agents/acp_scenario_agent.py``) whose profile has
``cwd = "worktree"``: ``session/new`` answers the worktree in
``_meta["oma-bridge/worktree"]``, the agent runs in it and its ``fs`` writes
land in it (its own edits); two sessions on one repository, with a commit on main between
them, each start at their own HEAD; ``session/close`` removes the unchanged
one and keeps the changed one (said in its ``_meta``); a folder in no
repository is refused saying so; after a daemon restart the session is
resumed in the same worktree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from acp_facade.harness import SCENARIO_AGENT, Facade, facade_daemon, run_sdk_client

from isolation.gitrepo import commit, git, make_repository

META = "oma-bridge/worktree"
TREE = f"""
[agents.tree]
kind = "acp"
command = "@python"
args = [{str(SCENARIO_AGENT)!r}]
cwd = "worktree"
"""


def script(facade: Facade, cwd: Path, *steps: dict[str, Any]) -> dict[str, Any]:
    return {
        "command": facade.shim("tree"),
        "cwd": str(cwd),
        "steps": [{"op": "initialize"}, *steps],
    }


def test_sessions_in_worktrees_through_the_python_sdk(tmp_path: Path) -> None:
    with facade_daemon(tmp_path, agents=TREE) as facade:
        repository, first = make_repository(facade.work / "repo")
        one = run_sdk_client(
            script(
                facade,
                repository,
                {"op": "new"},
                {"op": "prompt", "text": "where"},
                {"op": "prompt", "text": "edit notes.txt from session one"},
                {"op": "close"},
            ),
            facade.env,
        )
        made = one.result("new")
        tree = made["_meta"][META]
        session = made["sessionId"]
        path = facade.state / "worktrees" / session
        assert tree == {"path": str(path), "branch": f"oma/{session}", "base": first}
        assert "".join(one.chunks()[:1]) == f"session={path} process={path}"
        assert one.chunks()[-1] == "edited"
        assert (path / "notes.txt").read_text() == "from session one"
        assert not (repository / "notes.txt").exists()
        closed = one.result("close")
        assert closed["_meta"][META] == {**tree, "kept": True, "changes": "1 changed file"}
        assert f"oma/{session}" in git(repository, "branch", "--list")

        second = commit(repository, "main.txt", "main\n", "main moves on")
        two = run_sdk_client(
            script(
                facade,
                repository,
                {"op": "new"},
                {"op": "prompt", "text": "where"},
                {"op": "close"},
            ),
            facade.env,
        )
        other = two.result("new")["_meta"][META]
        assert other["base"] == second and other["path"] != tree["path"]
        assert other["branch"] != tree["branch"]
        assert two.chunks() == [f"session={other['path']} process={other['path']}"]
        assert two.result("close")["_meta"][META]["kept"] is False
        assert not Path(other["path"]).exists()
        assert other["branch"] not in git(repository, "branch", "--list")

        plain = facade.work / "plain"
        plain.mkdir()
        refused = run_sdk_client(script(facade, plain, {"op": "new"}), facade.env)
        error = refused.error("new")
        assert error["code"] == -32602
        assert f"{plain} is not inside a git repository" in error["message"]


def test_a_restarted_daemon_resumes_the_session_in_its_worktree(tmp_path: Path) -> None:
    with facade_daemon(tmp_path, agents=TREE) as facade:
        repository, _ = make_repository(facade.work / "repo")
        before = run_sdk_client(
            script(
                facade,
                repository,
                {"op": "new"},
                {"op": "prompt", "text": "edit half.txt half done"},
            ),
            facade.env,
        )
        made = before.result("new")
        session, tree = made["sessionId"], made["_meta"][META]
        facade.restart()
        # The clean stop kept the worktree for the session to come back to.
        assert (Path(tree["path"]) / "half.txt").read_text() == "half done"
        after = run_sdk_client(
            script(
                facade,
                repository,
                {"op": "resume", "sessionId": session},
                {"op": "prompt", "text": "where"},
                {"op": "close"},
            ),
            facade.env,
        )
        assert after.chunks() == [f"session={tree['path']} process={tree['path']}"]
        closed = after.result("close")["_meta"][META]
        assert closed == {**tree, "kept": True, "changes": "1 changed file"}
