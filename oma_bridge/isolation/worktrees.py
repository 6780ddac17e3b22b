"""A git worktree per agent: made at the repository's HEAD, ended when unchanged (PROTOCOL §19.2).

:class:`Worktrees` keeps the worktrees of one folder (the daemon's is
``$XDG_STATE_HOME/oma-bridge/worktrees``): :meth:`Worktrees.create` makes
``<folder>/<name>`` on the new branch ``oma/<name>`` with an explicit base
commit, the repository's ``HEAD`` when it is called
(``git worktree add -b oma/<name> <folder>/<name> <sha>``), so a worktree never
starts from another branch than the one the client stood on, whatever
branch another worktree is on; :meth:`Worktrees.finish` removes it with its
branch when nothing changed (no change in its files, untracked ones
included, and no new commit), and keeps it otherwise.  Each worktree has a
record beside it (``<name>.json``, private) that says where it came from,
so that a daemon started again finds it (resume, ``oma-bridge worktrees``).
``docs/isolation.md`` ("A git worktree per session") tells the whole model.

The library uses it as it is::

    worktrees = Worktrees(Path("~/.local/state/my-app/worktrees").expanduser())
    tree = await worktrees.create("fix-1", "/path/in/my/repository")
    agent = Agent(AgentConfig(name="fix", backend=ProcessConfig(command=..., cwd=str(tree.path))))
    ...
    state = await worktrees.finish(tree)  # state.changed: kept, else removed
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import orjson

from oma_bridge.errors import WorktreeError
from oma_bridge.isolation.git import GitFailed, run_git
from oma_bridge.private_files import make_private_folder, open_checked, open_private
from oma_bridge.supervision.supervisor import Supervisor

__all__ = ["BRANCH_PREFIX", "Worktree", "WorktreeState", "Worktrees"]

logger = logging.getLogger(__name__)

#: Every worktree's branch is ``oma/<name>``.
BRANCH_PREFIX = "oma/"
#: A worktree's name: a folder name and a branch name component, nothing to quote.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_RECORD = ".json"


@dataclass(frozen=True)
class Worktree:
    """One worktree: where it is, its branch and base commit, and the repository it is of."""

    name: str
    path: Path
    branch: str
    #: The commit it started at: the repository's HEAD when it was made.
    base: str
    #: The top folder of the client's repository (its main worktree, or the
    #: worktree the client stood in).
    repository: Path
    created_at: float
    #: Who it is for (the daemon: the profile's name).
    owner: str | None = None

    def to_wire(self) -> dict[str, str]:
        """``{"path", "branch", "base"}``: how ``agent/open`` and ``session/new`` show it."""
        return {"path": str(self.path), "branch": self.branch, "base": self.base}

    def record(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": str(self.path),
            "branch": self.branch,
            "base": self.base,
            "repository": str(self.repository),
            "createdAt": self.created_at,
            "owner": self.owner,
        }

    @classmethod
    def from_record(cls, data: Any) -> Worktree:
        """A worktree from its record; ``ValueError`` for one that is not one."""
        if not isinstance(data, dict):
            raise ValueError("not an object")
        fields = ("name", "path", "branch", "base", "repository")
        if not all(isinstance(data.get(key), str) and data[key] for key in fields):
            raise ValueError("a field is missing")
        created = data.get("createdAt")
        owner = data.get("owner")
        return cls(
            name=data["name"],
            path=Path(data["path"]),
            branch=data["branch"],
            base=data["base"],
            repository=Path(data["repository"]),
            created_at=float(created) if isinstance(created, int | float) else 0.0,
            owner=owner if isinstance(owner, str) else None,
        )


@dataclass(frozen=True)
class WorktreeState:
    """What changed in a worktree since it was made (nothing: it can go)."""

    #: Files changed, added or deleted, untracked ones included (``git status``).
    changed_files: int = 0
    #: Commits on its HEAD that its base does not have.
    new_commits: int = 0
    #: Its HEAD or its branch is no longer at the base (rewound, switched, renamed).
    moved: bool = False
    #: Its folder is gone (deleted by hand).
    missing: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.changed_files or self.new_commits or self.moved)

    def describe(self) -> str:
        """In words, for the journal note and ``oma-bridge worktrees``."""
        parts = []
        if self.changed_files:
            parts.append(f"{self.changed_files} changed file{'s' * (self.changed_files != 1)}")
        if self.new_commits:
            parts.append(f"{self.new_commits} new commit{'s' * (self.new_commits != 1)}")
        if self.moved and not self.new_commits:
            parts.append("its HEAD or branch moved off the base")
        if self.missing:
            parts.append("its folder is gone")
        return ", ".join(parts) or "unchanged"

    def to_wire(self) -> dict[str, Any]:
        return {
            "changed": self.changed,
            "changedFiles": self.changed_files,
            "newCommits": self.new_commits,
            "missing": self.missing,
            "changes": self.describe(),
        }


class Worktrees:
    """The worktrees of ``folder`` (see the module docstring).

    ``git`` names the binary; git runs as a supervised child of
    ``supervisor`` (the process-wide one by default, :mod:`.git`).  Calls on
    one repository are made one at a time (git locks its worktree list).
    """

    def __init__(
        self, folder: Path, *, git: str = "git", supervisor: Supervisor | None = None
    ) -> None:
        self.folder = folder
        self.git = git
        self.supervisor = supervisor
        self._locks: dict[str, anyio.Lock] = {}

    async def _git(self, *args: str, cwd: Path | str) -> str:
        return await run_git(args, cwd=cwd, git=self.git, supervisor=self.supervisor)

    def _lock(self, repository: Path) -> anyio.Lock:
        return self._locks.setdefault(str(repository), anyio.Lock())

    # -- making one -------------------------------------------------------------------

    async def repository_of(self, cwd: str | os.PathLike[str]) -> tuple[Path, str]:
        """The top folder of the repository ``cwd`` is in, and its HEAD commit.

        :class:`WorktreeError` (``not_a_repository``) for a folder outside
        any repository, a bare one, or one without a commit.  One git call
        when all is well.
        """
        folder = Path(cwd)
        if not folder.is_absolute() or not await anyio.Path(folder).is_dir():
            raise WorktreeError(f"{cwd} is not an absolute path to a folder", not_a_repository=True)
        with contextlib.suppress(GitFailed):
            top, head = (
                await self._git("rev-parse", "--show-toplevel", "HEAD^{commit}", cwd=folder)
            ).splitlines()
            return Path(top), head
        try:  # which of the two it is
            top = (await self._git("rev-parse", "--show-toplevel", cwd=folder)).strip()
        except GitFailed as error:
            raise WorktreeError(
                f"{cwd} is not inside a git repository ({error.said})",
                "open the session in a folder of a git repository (git init; git commit), "
                'or give the profile cwd = "client" to run in the folder itself',
                not_a_repository=True,
            ) from None
        raise WorktreeError(
            f"the repository {top} has no commit yet: a worktree starts at HEAD's commit",
            "commit once (git commit --allow-empty -m start)",
            not_a_repository=True,
        )

    async def create(
        self,
        name: str,
        cwd: str | os.PathLike[str],
        *,
        owner: str | None = None,
        accept: Callable[[Path], None] | None = None,
    ) -> Worktree:
        """A new worktree ``<folder>/<name>`` of ``cwd``'s repository at HEAD, on ``oma/<name>``.

        ``accept`` sees the repository's top folder before anything is made
        (and raises to refuse it).
        """
        if not _NAME.fullmatch(name):
            raise ValueError(f"a worktree name is letters, digits, _ . - (not {name!r})")
        repository, base = await self.repository_of(cwd)
        if accept is not None:
            accept(repository)
        path = self.folder / name
        branch = BRANCH_PREFIX + name
        if await anyio.to_thread.run_sync(self._taken, name):
            raise WorktreeError(f"a worktree named {name} exists already in {self.folder}")
        tree = Worktree(name, path, branch, base, repository, time.time(), owner)
        async with self._lock(repository):
            try:
                # The base is the commit itself, never a branch name: the new
                # branch starts there whatever branch any other worktree is on.
                await self._git(
                    "worktree", "add", "--quiet", "--no-track", "-b", branch, str(path), base,
                    cwd=repository,
                )  # fmt: skip
            except GitFailed as error:
                raise WorktreeError(
                    f"git could not make the worktree {path}: {error.said}"
                ) from None
        try:
            await anyio.to_thread.run_sync(self._write_record, tree)
        except OSError as error:
            with anyio.CancelScope(shield=True):
                await self.remove(tree)
            raise WorktreeError(
                f"the record of the worktree {path} cannot be written: {error}"
            ) from None
        logger.info("worktree %s made at %s on %s (base %s)", path, repository, branch, base[:12])
        return tree

    # -- what changed, and ending one ------------------------------------------------------------

    async def state(self, tree: Worktree) -> WorktreeState:
        """What changed in ``tree`` since its base.

        One ``git status --porcelain=v2 --branch`` (its HEAD, its branch, its
        changed and untracked files) when nothing moved; a ``rev-list`` more
        when HEAD has commits, a ``rev-parse`` of the branch when HEAD is on
        another.
        """
        if not await anyio.Path(tree.path).is_dir():
            tip = await self._branch_tip(tree)
            return WorktreeState(moved=tip not in (None, tree.base), missing=True)
        try:
            status = await self._git(
                "status", "--porcelain=v2", "--branch", "--untracked-files=all",
                "--ignore-submodules=none",
                cwd=tree.path,
            )  # fmt: skip
            head, on, files = _parse_status(status)
            ahead = 0
            if head != tree.base:
                counted = await self._git(
                    "rev-list", "--count", f"{tree.base}..HEAD", cwd=tree.path
                )
                ahead = int(counted.strip() or 0)
        except (GitFailed, ValueError) as error:
            said = error.said if isinstance(error, GitFailed) else str(error)
            raise WorktreeError(f"git cannot read the worktree {tree.path}: {said}") from None
        tip = head if on == tree.branch else await self._branch_tip(tree)
        return WorktreeState(files, ahead, head != tree.base or tip != tree.base)

    async def _branch_tip(self, tree: Worktree) -> str | None:
        if not await anyio.Path(tree.repository).is_dir():
            return None
        with contextlib.suppress(GitFailed):
            ref = f"refs/heads/{tree.branch}"
            return (
                await self._git("rev-parse", "--verify", "-q", ref, cwd=tree.repository)
            ).strip()
        return None

    async def finish(self, tree: Worktree) -> WorktreeState:
        """Remove ``tree`` and its branch when unchanged; keep it otherwise. Its state."""
        state = await self.state(tree)
        if not state.changed:
            await self.remove(tree)
        return state

    async def remove(self, tree: Worktree) -> None:
        """Remove ``tree``'s folder, its branch (when still at the base) and its record.

        Call it after :meth:`state` said unchanged (or to throw changes away):
        the folder goes with ``git worktree remove --force``, so ignored files
        (build output) go with it.  The branch goes with ``git update-ref -d``
        given the base, which deletes it only if it still points there.
        """
        async with self._lock(tree.repository):
            if await anyio.Path(tree.repository).is_dir():
                with contextlib.suppress(GitFailed):
                    if await anyio.Path(tree.path).is_dir():
                        await self._git(
                            "worktree", "remove", "--force", str(tree.path), cwd=tree.repository
                        )
                    else:
                        await self._git("worktree", "prune", cwd=tree.repository)
                with contextlib.suppress(GitFailed):
                    ref = f"refs/heads/{tree.branch}"
                    await self._git("update-ref", "-d", ref, tree.base, cwd=tree.repository)
            if await anyio.Path(tree.path).is_dir():  # the repository is gone, or git could not
                await anyio.to_thread.run_sync(shutil.rmtree, tree.path, True)
            with contextlib.suppress(FileNotFoundError):
                await anyio.Path(self._record_path(tree.name)).unlink()
        logger.info("worktree %s removed with its branch %s", tree.path, tree.branch)

    # -- records ---------------------------------------------------------------------

    def _taken(self, name: str) -> bool:
        """Make the folder (private); whether ``name`` is in use in it."""
        make_private_folder(self.folder)
        return os.path.lexists(self.folder / name) or os.path.lexists(self._record_path(name))

    def _record_path(self, name: str) -> Path:
        return self.folder / (name + _RECORD)

    def _write_record(self, tree: Worktree) -> None:
        temp = self.folder / f".{tree.name}{_RECORD}.tmp"
        fd = open_private(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            os.write(fd, orjson.dumps(tree.record()))
        finally:
            os.close(fd)
        temp.replace(self._record_path(tree.name))

    def get(self, name: str) -> Worktree | None:
        """The worktree named ``name``, from its record (``None``: no such record)."""
        if not _NAME.fullmatch(name):
            return None
        return self._read(self._record_path(name))

    def records(self) -> list[Worktree]:
        """Every worktree with a record in the folder, oldest first."""
        try:
            paths = sorted(self.folder.glob("*" + _RECORD))
        except OSError:
            return []
        found = [tree for path in paths if (tree := self._read(path)) is not None]
        return sorted(found, key=lambda tree: tree.created_at)

    def _read(self, path: Path) -> Worktree | None:
        try:
            fd = open_checked(path)
        except FileNotFoundError:
            return None
        except OSError as error:
            logger.warning("worktree record %s skipped: %s", path, error)
            return None
        try:
            with os.fdopen(fd, "rb") as file:
                tree = Worktree.from_record(orjson.loads(file.read()))
        except (OSError, ValueError) as error:
            logger.warning("worktree record %s skipped: %s", path, error)
            return None
        if tree.path != self.folder / tree.name:
            logger.warning("worktree record %s skipped: it names a folder elsewhere", path)
            return None
        return tree


def _parse_status(status: str) -> tuple[str, str | None, int]:
    """HEAD's commit, the branch HEAD is on (``None``: detached), and the changed entries."""
    head: str | None = None
    on: str | None = None
    files = 0
    for line in status.splitlines():
        if line.startswith("# branch.oid "):
            head = line.removeprefix("# branch.oid ").strip()
        elif line.startswith("# branch.head "):
            name = line.removeprefix("# branch.head ").strip()
            on = None if name == "(detached)" else name
        elif line and not line.startswith("#"):
            files += 1
    if head is None or head == "(initial)":
        raise ValueError("no HEAD commit in git status")
    return head, on, files
