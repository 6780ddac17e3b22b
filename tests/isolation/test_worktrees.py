"""The library's worktrees (oma_bridge/isolation): real git, a real repository, real folders.

Each worktree starts at the HEAD of the moment it is made (a commit on main
between two leaves each at its own base), on a branch of its own, never the
branch another worktree is on; an unchanged one goes with its branch, a
changed one (a file, an untracked file, a commit) stays; a folder outside
any repository is refused saying so; git runs with none of the variables
that would point it elsewhere.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from isolation.gitrepo import commit, git, make_repository
from oma_bridge.errors import WorktreeError
from oma_bridge.isolation import Worktrees

pytestmark = pytest.mark.anyio


async def test_two_worktrees_each_at_the_head_of_their_start(folder: Path) -> None:
    repository, first = make_repository(folder / "repo")
    worktrees = Worktrees(folder / "state" / "worktrees")
    one = await worktrees.create("agt_one", repository)
    second = commit(repository, "later.txt", "later\n", "on main, between the two")
    two = await worktrees.create("agt_two", repository / "")

    assert (one.base, two.base) == (first, second)
    assert (one.branch, two.branch) == ("oma/agt_one", "oma/agt_two")
    assert one.path == folder / "state" / "worktrees" / "agt_one"
    assert git(one.path, "rev-parse", "HEAD") == first
    assert git(two.path, "rev-parse", "HEAD") == second
    assert git(one.path, "branch", "--show-current") == "oma/agt_one"
    assert not (one.path / "later.txt").exists() and (two.path / "later.txt").exists()
    assert one.to_wire() == {"path": str(one.path), "branch": "oma/agt_one", "base": first}
    # The folder and the records are the daemon's alone.
    assert stat.S_IMODE(worktrees.folder.stat().st_mode) == 0o700
    record = worktrees.folder / "agt_one.json"
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    assert [tree.name for tree in worktrees.records()] == ["agt_one", "agt_two"]
    assert worktrees.get("agt_two") == two


async def test_a_worktree_from_one_on_another_branch_starts_at_the_clients_head(
    folder: Path,
) -> None:
    """The base is the commit the client stands on, never another worktree's branch."""
    repository, first = make_repository(folder / "repo")
    worktrees = Worktrees(folder / "worktrees")
    one = await worktrees.create("agt_one", repository)
    ahead = commit(one.path, "mine.txt", "agent one's\n", "agent one's commit")
    # A client standing in the first worktree gets a worktree at ITS head.
    two = await worktrees.create("agt_two", one.path)
    three = await worktrees.create("agt_three", repository)
    assert two.base == ahead and three.base == first
    assert git(three.path, "rev-parse", "HEAD") == first
    assert git(three.path, "branch", "--show-current") == "oma/agt_three"


async def test_unchanged_goes_with_its_branch_changed_stays(folder: Path) -> None:
    repository, _ = make_repository(folder / "repo")
    worktrees = Worktrees(folder / "worktrees")
    trees = {
        name: await worktrees.create(name, repository) for name in ("same", "edit", "new", "commit")
    }
    (trees["edit"].path / "README").write_text("edited\n")
    (trees["new"].path / "untracked.txt").write_text("new\n")
    commit(trees["commit"].path, "c.txt", "c\n", "the agent's commit")

    state = await worktrees.finish(trees["same"])
    assert not state.changed and state.describe() == "unchanged"
    assert not trees["same"].path.exists() and worktrees.get("same") is None
    assert "oma/same" not in git(repository, "branch", "--list")
    assert str(trees["same"].path) not in git(repository, "worktree", "list")

    for name, said in (
        ("edit", "1 changed file"),
        ("new", "1 changed file"),
        ("commit", "1 new commit"),
    ):
        state = await worktrees.finish(trees[name])
        assert state.changed and state.describe() == said, name
        assert trees[name].path.is_dir() and worktrees.get(name) == trees[name]
        assert f"oma/{name}" in git(repository, "branch", "--list")


async def test_a_folder_outside_any_repository_is_refused_saying_so(folder: Path) -> None:
    plain = folder / "plain"
    plain.mkdir()
    worktrees = Worktrees(folder / "worktrees")
    with pytest.raises(WorktreeError) as caught:
        await worktrees.create("agt_x", plain)
    assert caught.value.not_a_repository
    assert f"{plain} is not inside a git repository" in caught.value.message
    assert "git init" in caught.value.message
    empty = folder / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    with pytest.raises(WorktreeError, match="has no commit yet") as caught:
        await worktrees.create("agt_y", empty)
    assert caught.value.not_a_repository
    assert not (folder / "worktrees" / "agt_x").exists()


async def test_git_gets_none_of_the_variables_that_point_it_elsewhere(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon started from a git hook has GIT_DIR and friends: they must not steer it."""
    repository, first = make_repository(folder / "repo")
    decoy, _ = make_repository(folder / "decoy")
    monkeypatch.setenv("GIT_DIR", str(decoy / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(decoy))
    monkeypatch.setenv("GIT_INDEX_FILE", str(decoy / ".git" / "index"))
    tree = await Worktrees(folder / "worktrees").create("agt_z", repository)
    assert tree.repository == repository and tree.base == first
    monkeypatch.delenv("GIT_DIR")
    monkeypatch.delenv("GIT_WORK_TREE")
    monkeypatch.delenv("GIT_INDEX_FILE")
    assert "oma/agt_z" in git(repository, "branch", "--list")
    assert "oma/agt_z" not in git(decoy, "branch", "--list")


async def test_a_missing_git_is_a_clear_error(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repository, _ = make_repository(folder / "repo")
    monkeypatch.setenv("PATH", str(folder / "nothing"))
    with pytest.raises(WorktreeError, match='no git binary: "git" not found on PATH'):
        await Worktrees(folder / "worktrees").create("agt_g", repository)
    assert not (folder / "worktrees" / "agt_g").exists()


async def test_a_repository_whose_path_has_spaces_and_a_branch_moved_by_hand(folder: Path) -> None:
    repository, first = make_repository(folder / "my repo")
    worktrees = Worktrees(folder / "worktrees")
    tree = await worktrees.create("agt_s", repository / "")
    assert tree.repository == repository and tree.base == first
    # HEAD switched off its branch: the worktree changed (its branch may hold work).
    git(tree.path, "checkout", "-q", "--detach")
    state = await worktrees.state(tree)
    assert not state.changed  # detached at the base, the branch still there: nothing to keep
    git(tree.path, "checkout", "-q", "oma/agt_s")
    commit(tree.path, "x.txt", "x\n", "work")
    git(tree.path, "checkout", "-q", "--detach", first)
    state = await worktrees.state(tree)
    assert (
        state.changed
        and state.moved
        and state.describe() == "its HEAD or branch moved off the base"
    )
    await worktrees.finish(tree)
    assert tree.path.is_dir() and "oma/agt_s" in git(repository, "branch", "--list")
