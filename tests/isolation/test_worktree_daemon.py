"""``cwd = "worktree"`` through the wire (PROTOCOL §19.2): a daemon, real git, a real repository.

A process agent of a worktree profile edits a file when asked and prints
its folder: two agents on one repository get two worktrees on two branches,
each at the HEAD of its start (a commit on main between them); an edit
lands in its agent's worktree only; an unchanged one goes with its branch
on close, a changed one stays, named in the answer, the journal and the
audit log; a folder in no repository, outside the roots or missing is
refused saying so; a request with no folder never runs in the daemon's;
``worktrees/list`` and ``worktrees/prune`` see and clear what is left.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from daemon.conftest import daemon, service_of

from isolation.gitrepo import branches, commit, git, make_repository
from oma_bridge.client import DaemonError, connect
from oma_bridge.isolation import Worktrees

pytestmark = pytest.mark.anyio

#: Prints its folder; a line "edit NAME TEXT" of its input (a task's prompt has
#: more lines) writes NAME first.
EDITOR = """
while read -r verb name text || [ -n "$verb" ]; do
  if [ "$verb" = edit ]; then printf '%s\\n' "$text" > "$name"; fi
done
pwd
"""


def agents(*extra: str) -> str:
    return f"""
[agents.coder]
kind = "process"
command = "sh"
args = ["-c", {json.dumps(EDITOR)}]
cwd = "worktree"

[agents.plain]
kind = "process"
command = "sh"
args = ["-c", "pwd"]
{"".join(extra)}
"""


def gone(path: str | Path) -> bool:
    return not Path(path).exists()


def server(folder: Path) -> str:
    return f'workspace_roots = ["{folder}"]'


async def refused(client: Any, method: str, params: Any) -> DaemonError:
    with pytest.raises(DaemonError) as caught:
        await client.request(method, params)
    return caught.value


async def test_two_agents_two_worktrees_each_at_its_start_and_their_close(
    folder: Path,
) -> None:
    repository, first = make_repository(folder / "repo")
    state = folder / "state"
    async with (
        daemon(folder, server(folder), agents()) as running,
        connect(discovery_dir=folder) as client,
    ):
        one = await client.open("coder", cwd=str(repository / "."))
        second = commit(repository, "main.txt", "on main\n", "main moves on")
        two = await client.open("coder", cwd=str(repository))
        assert one.worktree is not None and two.worktree is not None
        assert one.worktree == {
            "path": str(state / "worktrees" / one.agent_id),
            "branch": f"oma/{one.agent_id}",
            "base": first,
        }
        assert two.worktree["base"] == second and two.worktree["branch"] == f"oma/{two.agent_id}"
        tree_one, tree_two = Path(one.worktree["path"]), Path(two.worktree["path"])
        assert git(tree_one, "rev-parse", "HEAD") == first
        assert git(tree_two, "rev-parse", "HEAD") == second

        # The agent runs in its worktree, and its edit lands there only.
        result = await one.run("edit notes.txt agent one was here")
        assert result.success, result.to_wire()
        assert result.output.strip() == str(tree_one)
        assert (tree_one / "notes.txt").read_text() == "agent one was here\n"
        assert not (repository / "notes.txt").exists() and not (tree_two / "notes.txt").exists()
        assert (await two.run("look")).output.strip() == str(tree_two)

        # A fork would share the worktree: refused, saying why.
        error = await refused(client, "agent/fork", {"agentId": two.agent_id})
        assert error.rpc_code == -32601 and error.data["name"] == "ForkUnsupported"
        assert "would share" in str(error)

        # The unchanged one goes, with its branch; the changed one stays, named.
        opened = dict(two.worktree)
        await two.close()
        assert two.worktree == {**opened, "kept": False, "changes": "unchanged"}
        assert gone(tree_two)
        assert f"oma/{two.agent_id}" not in git(repository, "branch", "--list")
        journal = service_of(running).host.agents[one.agent_id].journal
        answer = await client.request("agent/close", {"agentId": one.agent_id})
        assert answer == {"worktree": {**one.worktree, "kept": True, "changes": "1 changed file"}}
        assert (tree_one / "notes.txt").exists()
        assert f"oma/{one.agent_id}" in git(repository, "branch", "--list")
        notes = [entry.data["text"] for entry in journal.entries() if entry.data["type"] == "note"]
        assert len(notes) == 1 and notes[0].startswith(
            f"worktree kept: {tree_one} on branch oma/{one.agent_id} (1 changed file; base "
        )
        audit = (await client.request("daemon/audit", {"limit": 50}))["records"]
        kept = [r for r in audit if r["event"] == "worktree" and r["agentId"] == one.agent_id]
        assert kept and kept[0]["kept"] is True and kept[0]["path"] == str(tree_one)
        listed = (await client.request("worktrees/list", {}))["worktrees"]
        assert [(row["agentId"], row["agent"], row["changed"]) for row in listed] == [
            (one.agent_id, "gone", True)
        ]


async def test_folders_that_cannot_have_a_worktree_are_refused_saying_so(
    folder: Path,
) -> None:
    work = folder / "work"
    plain = work / "plain"
    plain.mkdir(parents=True)
    make_repository(work / "repo")
    elsewhere, _ = make_repository(folder / "elsewhere")
    # A repository above the roots (a home folder of dotfiles, say), a root inside it.
    dots, _ = make_repository(folder / "dots")
    (dots / "projects").mkdir()
    roots = f'workspace_roots = ["{work}", "{dots / "projects"}"]'
    async with (
        daemon(folder, roots, agents()),
        connect(discovery_dir=folder) as client,
    ):
        error = await refused(client, "agent/open", {"profile": "coder", "cwd": str(plain)})
        assert error.rpc_code == -32602 and error.data["name"] == "NotARepository"
        assert f"{plain} is not inside a git repository" in str(error)
        assert "git init" in str(error)

        error = await refused(client, "agent/open", {"profile": "coder", "cwd": str(elsewhere)})
        assert error.rpc_code == -32012 and "outside the workspace roots" in str(error)
        assert "[server] workspace_roots" in str(error)
        error = await refused(
            client, "agent/open", {"profile": "coder", "cwd": str(dots / "projects")}
        )
        assert error.rpc_code == -32012
        said = f"the git repository {dots} of cwd {dots / 'projects'} is not inside them: cwd"
        assert said in str(error) and "[server] workspace_roots" in str(error)

        error = await refused(client, "agent/open", {"profile": "coder"})
        assert error.rpc_code == -32602 and error.data["name"] == "WorktreeNeedsCwd"
        assert 'agent/open without "cwd"' in str(error)
        error = await refused(client, "agent/open", {"profile": "coder", "cwd": "relative"})
        assert error.rpc_code == -32602 and "cwd must be absolute" in str(error)
        # A request with no client folder never runs it in the daemon's own folder.
        error = await refused(
            client, "oma/runAgent", {"config": {"profile": "coder"}, "input": "x"}
        )
        assert error.rpc_code == -32602 and error.data["name"] == "WorktreeNeedsCwd"
        # A profile that does not run in the client's folder takes no cwd.
        error = await refused(client, "agent/open", {"profile": "plain", "cwd": str(plain)})
        assert error.rpc_code == -32602 and 'cwd = "worktree"' in str(error)
        made = folder / "state" / "worktrees"
        assert not made.exists() or not any(made.iterdir())
        assert branches(elsewhere) == ["main"] and branches(dots) == ["main"]


async def test_list_and_prune_clear_only_the_unchanged_worktrees_of_gone_agents(
    folder: Path,
) -> None:
    repository, _ = make_repository(folder / "repo")
    leftovers = Worktrees(folder / "state" / "worktrees")
    async with (
        daemon(folder, server(folder), agents()),
        connect(discovery_dir=folder) as client,
    ):
        # What a daemon killed mid-session leaves: worktrees of agents no one has.
        orphan = await leftovers.create("agt_orphan", repository)
        changed = await leftovers.create("agt_changed", repository)
        commit(changed.path, "work.txt", "work\n", "an agent's commit")
        live = await client.open("coder", cwd=str(repository))
        rows = {
            row["agentId"]: row for row in (await client.request("worktrees/list", {}))["worktrees"]
        }
        assert {name: (row["agent"], row["changed"]) for name, row in rows.items()} == {
            "agt_orphan": ("gone", False),
            "agt_changed": ("gone", True),
            live.agent_id: ("open", False),
        }
        assert rows["agt_changed"]["changes"] == "1 new commit"
        assert rows["agt_orphan"]["repository"] == str(repository)

        pruned = await client.request("worktrees/prune", {})
        assert [row["agentId"] for row in pruned["removed"]] == ["agt_orphan"]
        assert sorted(row["agentId"] for row in pruned["kept"]) == sorted(
            ["agt_changed", live.agent_id]
        )
        assert not orphan.path.exists() and changed.path.is_dir()
        assert "oma/agt_orphan" not in git(repository, "branch", "--list")
        assert (await live.run("look")).output.strip() == live.worktree["path"]
        with anyio.fail_after(30):
            await live.close()


async def test_a_team_of_two_tasks_on_a_worktree_profile_leaves_two_branches(
    folder: Path,
) -> None:
    repository, first = make_repository(folder / "repo")
    plain = folder / "plain"
    plain.mkdir()
    tasks = [
        {"id": "a", "title": "A", "description": "edit a.txt from task A", "assignee": "coder"},
        {"id": "b", "title": "B", "description": "edit b.txt from task B", "assignee": "coder"},
        {"id": "c", "title": "C", "description": "look", "assignee": "coder", "dependsOn": ["a"]},
    ]
    for task in tasks:
        task["cwd"] = str(repository)
    async with (
        daemon(folder, server(folder), agents()),
        connect(discovery_dir=folder) as client,
    ):
        answer = await client.request("oma/runTasks", {"tasks": tasks, "maxConcurrency": 2})
        assert answer["success"], answer
        by_id = {task["id"]: task for task in answer["tasks"]}
        assert {task["assignee"] for task in answer["tasks"]} == {"coder"}
        kept = {name: by_id[name]["worktree"] for name in ("a", "b")}
        for name, tree in kept.items():
            path = Path(tree["path"])
            assert tree["base"] == first and tree["kept"] is True, tree
            assert by_id[name]["result"]["output"].strip() == str(path)
            written = (path / f"{name}.txt").read_text()
            assert written == f"from task {name.upper()}\n"
            assert tree["branch"] in git(repository, "branch", "--list")
        assert kept["a"]["branch"] != kept["b"]["branch"]
        assert not (repository / "a.txt").exists() and not (repository / "b.txt").exists()
        # The task that changed nothing left nothing.
        looked = by_id["c"]["worktree"]
        assert looked["kept"] is False and gone(looked["path"])
        assert looked["branch"] not in git(repository, "branch", "--list")
        made = branches(repository)
        assert made == sorted(["main", kept["a"]["branch"], kept["b"]["branch"]])

        # Checked before anything is made: a task without its folder, or out of place.
        error = await refused(
            client, "oma/runTasks", {"tasks": [{**tasks[0], "cwd": None}, tasks[1]]}
        )
        assert error.rpc_code == -32602 and 'give the task a "cwd"' in str(error.data)
        error = await refused(client, "oma/runTasks", {"tasks": [{**tasks[0], "cwd": str(plain)}]})
        assert error.rpc_code == -32602 and "is not inside a git repository" in str(error)
        assert branches(repository) == made


@pytest.mark.usefixtures("require_bwrap")
async def test_a_sandboxed_worktree_agent_commits_but_plants_no_hook(folder: Path) -> None:
    """The worktree is the sandbox's folder: git works inside, the repository's hooks stay."""
    repository, base = make_repository(folder / "repo")
    git_dir = repository / ".git"
    script = f"""
echo inside > sandboxed.txt
git add sandboxed.txt
git -c user.name=Agent -c user.email=agent@example.invalid -c commit.gpgsign=false \\
  commit -q -m "from the sandbox" && echo committed
ls {repository} | tr '\\n' ' '; echo
echo 'touch {folder}/pwned' > {git_dir}/hooks/post-checkout 2>/dev/null || echo hook-refused
printf '[core]\\n\\thooksPath = /tmp\\n' >> {git_dir}/config 2>/dev/null || echo config-refused
"""
    profile = f"""
[agents.boxed]
kind = "process"
command = "sh"
args = ["-c", {json.dumps(script)}]
input = "none"
cwd = "worktree"
sandbox = "bwrap"
network = false
"""
    async with (
        daemon(folder, server(folder), agents(profile)),
        connect(discovery_dir=folder) as client,
    ):
        agent = await client.open("boxed", cwd=str(repository))
        assert agent.worktree is not None
        result = await agent.run("go")
        assert result.success, result.to_wire()
        lines = result.output.splitlines()
        # Its own commit, on its branch; the repository's other files are not there.
        assert lines[0] == "committed"
        assert lines[1].split() == [], lines  # only the bound .git, which ls does not show
        assert lines[2:] == ["hook-refused", "config-refused"]
        tree = Path(agent.worktree["path"])
        assert git(tree, "log", "-1", "--format=%s") == "from the sandbox"
        assert git(repository, "rev-parse", "main") == base
        assert not (git_dir / "hooks" / "post-checkout").exists()
        assert "hooksPath" not in (git_dir / "config").read_text()
        await agent.close()
        assert agent.worktree["kept"] is True and agent.worktree["changes"] == "1 new commit"


async def test_agent_open_takes_the_clients_folder_for_a_client_profile(folder: Path) -> None:
    """The same ``cwd`` param serves ``cwd = "client"`` profiles: the folder itself, no worktree."""
    project = folder / "project"
    project.mkdir()
    here = '\n[agents.here]\nkind = "process"\ncommand = "pwd"\ninput = "none"\ncwd = "client"\n'
    async with (
        daemon(folder, server(folder), agents(here)),
        connect(discovery_dir=folder) as client,
    ):
        agent = await client.open("here", cwd=str(project))
        assert agent.worktree is None
        assert (await agent.run("x")).output.strip() == str(project)
        await agent.close()
        error = await refused(client, "agent/open", {"profile": "here", "cwd": "/"})
        assert error.rpc_code == -32012 and "outside the workspace roots" in str(error)
