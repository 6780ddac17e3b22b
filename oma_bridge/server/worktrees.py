"""The daemon's ``cwd = "worktree"`` profiles: a git worktree per agent (PROTOCOL §19.2).

:class:`AgentWorktrees` is what the agent service, the ACP facade and team
runs call: :meth:`~AgentWorktrees.make` checks the client's folder (absolute,
inside the workspace roots, in a git repository) and makes the agent's
worktree (``$XDG_STATE_HOME/oma-bridge/worktrees/<agentId>`` on
``oma/<agentId>``, at the repository's HEAD: :mod:`oma_bridge.isolation`),
:meth:`~AgentWorktrees.resumed` finds it again for an agent resumed after a
restart (its record, beside it), and :meth:`~AgentWorktrees.close` removes an
unchanged one with its branch or keeps a changed one with a journal note.
``worktrees/list`` and ``worktrees/prune`` (extensions; ``oma-bridge
worktrees [--prune]``) show them and remove those whose agent is gone and
that have no change.

A sandboxed worktree agent (``sandbox = "bwrap"``) has the worktree as its
folder; so that git works inside, the repository's git folder is bound
read-write too (objects, refs, the worktree's own index), but its ``hooks``
and ``config`` read-only: a hook or a ``core.hooksPath`` written from inside
would run outside the sandbox the next time the user runs git.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Container
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread

from oma_bridge.errors import WireError, WorktreeError
from oma_bridge.isolation import Worktree, Worktrees
from oma_bridge.rpc.codes import AUTH_REQUIRED as SERVER_ERROR
from oma_bridge.rpc.codes import INVALID_PARAMS, METHOD_NOT_FOUND
from oma_bridge.server.agents.journal import Journal
from oma_bridge.server.audit import AuditLog
from oma_bridge.server.client_folder import check_inside_roots, client_folder
from oma_bridge.server.config import ServerConfig
from oma_bridge.server.methods import MethodRegistry
from oma_bridge.server.profiles import Profile
from oma_bridge.server.session import Session
from oma_bridge.wire.codes import not_found
from oma_bridge.wire.params import NoParams, parse_params

__all__ = [
    "WORKTREE",
    "WORKTREE_META",
    "AgentWorktrees",
    "Opening",
    "is_worktree_profile",
    "needs_worktree",
    "unforked_worktree",
    "worktree_error",
]

logger = logging.getLogger("oma_bridge.server")

#: The profile's ``cwd`` that asks for a worktree per agent.
WORKTREE = "worktree"
#: Where the facade's ``session/new`` (and ``session/close``) answer shows it.
WORKTREE_META = "oma-bridge/worktree"


def is_worktree_profile(profile: Profile) -> bool:
    return getattr(profile, "cwd", None) == WORKTREE


def needs_worktree(name: str, method: str) -> WireError:
    """-32602: a worktree profile reached by a request that has no client folder."""
    return WireError(
        INVALID_PARAMS,
        f'profile "{name}" runs in a git worktree of the client\'s repository (cwd = '
        f'"worktree"), and {method} names no folder: open it with agent/open and "cwd" '
        '(or the ACP facade\'s session/new), or give it a task of oma/runTasks with a "cwd"',
        {"name": "WorktreeNeedsCwd"},
    )


def unforked_worktree(agent_id: str, profile_name: str) -> WireError:
    """-32601 ``ForkUnsupported``: a fork would share the agent's worktree (§19.2 forbids it)."""
    return WireError(
        METHOD_NOT_FOUND,
        f'agent {agent_id} (profile "{profile_name}") cannot be forked: it runs in a git '
        'worktree of its own (cwd = "worktree"), which a fork would share; open another '
        "agent on the repository instead",
        {"name": "ForkUnsupported"},
    )


def worktree_error(error: WorktreeError) -> WireError:
    """The client's folder in no repository: -32602; git failing here: -32000."""
    if error.not_a_repository:
        return WireError(INVALID_PARAMS, error.message, {"name": "NotARepository"})
    return WireError(SERVER_ERROR, error.message, {"name": "WorktreeError", "reason": error.reason})


@dataclass(frozen=True)
class Opening:
    """An agent's folder as ``agent/open`` chose it: backend fields, answer keys, kept meta."""

    backend_update: dict[str, Any]
    answer: dict[str, Any]
    meta: dict[str, Any]


class AgentWorktrees:
    """The worktrees of the daemon's agents (see the module docstring)."""

    def __init__(
        self,
        folder: Path,
        settings: Callable[[], ServerConfig],
        *,
        audit: AuditLog | None = None,
    ) -> None:
        self.worktrees = Worktrees(folder)
        #: The daemon's config now (its workspace roots and file; a reload changes it).
        self.settings = settings
        self.audit = audit
        #: The worktree of each open agent that has one.
        self.open: dict[str, Worktree] = {}

    def register(
        self, registry: MethodRegistry, agents: Callable[[], tuple[Container[str], Container[str]]]
    ) -> None:
        """``worktrees/list`` and ``worktrees/prune``; ``agents()``: the open and resumable ids."""

        async def listed(session: Session, params: Any) -> dict[str, Any]:
            parse_params(NoParams, params)
            return {"worktrees": await self.rows(*agents())}

        async def pruned(session: Session, params: Any) -> dict[str, Any]:
            parse_params(NoParams, params)
            return await self.prune(*agents())

        registry.add("worktrees/list", listed)
        registry.add("worktrees/prune", pruned)

    # -- an agent's worktree ------------------------------------------------------------

    async def opening(self, agent_id: str, name: str, profile: Profile, cwd: str | None) -> Opening:
        """What ``agent/open`` with the client's ``cwd`` (or none) makes of ``profile``'s folder."""
        if is_worktree_profile(profile):
            if cwd is None:
                raise needs_worktree(name, 'agent/open without "cwd"')
            tree, folder = await self.make(agent_id, name, profile, cwd)
            update = self.backend_update(profile, tree)
            return Opening(update, {"worktree": tree.to_wire()}, {"cwd": folder})
        if cwd is None:
            return Opening({}, {}, {})
        if getattr(profile, "cwd", None) == "client" and profile.kind != "llm":
            folder = client_folder(cwd, self.settings(), name)
            update = {"cwd": Path(folder) if profile.kind == "acp" else folder}
            return Opening(update, {}, {"cwd": folder})
        raise WireError(
            INVALID_PARAMS,
            f'profile "{name}" does not run in the client\'s folder, so agent/open takes no '
            '"cwd" for it; set cwd = "client" or cwd = "worktree" in its profile for that',
        )

    async def make(
        self, agent_id: str, name: str, profile: Profile, cwd: object
    ) -> tuple[Worktree, str]:
        """The worktree of a new agent opened on the client's ``cwd``, and that folder."""
        folder = client_folder(cwd, self.settings(), name)

        def accept(repository: Path) -> None:
            # The repository itself must be in the roots, not only the folder
            # (a home folder that is a repository of dotfiles, say).
            what = f"the git repository {repository} of cwd {folder} is not inside them"
            real = Path(os.path.realpath(repository))
            check_inside_roots(real, self.settings(), str(repository), what)

        try:
            tree = await self.worktrees.create(agent_id, folder, owner=name, accept=accept)
        except WorktreeError as error:
            raise worktree_error(error) from None
        self.open[agent_id] = tree
        return tree, folder

    def backend_update(self, profile: Profile, tree: Worktree) -> dict[str, Any]:
        """The backend fields of an agent whose folder is ``tree``: its cwd, its sandbox's paths."""
        kind = getattr(profile, "kind", None)
        update: dict[str, Any] = {"cwd": tree.path if kind == "acp" else str(tree.path)}
        if getattr(profile, "sandbox", "none") != "none":
            git_dir = _common_git_dir(tree)
            if git_dir is not None:
                (git_dir / "hooks").mkdir(exist_ok=True)
                write = (*getattr(profile, "sandbox_write", ()), str(git_dir))
                read = (*getattr(profile, "sandbox_read", ()), str(git_dir / "hooks"))
                update |= {"sandbox_write": write, "sandbox_read": (*read, str(git_dir / "config"))}
        return update

    def answer(self, agent_id: str) -> dict[str, Any]:
        """``{"worktree": {...}}`` for an open agent that has one, else ``{}``."""
        tree = self.open.get(agent_id)
        return {"worktree": tree.to_wire()} if tree is not None else {}

    async def discard(self, agent_id: str) -> None:
        """Remove the worktree of an agent that never opened (its config was refused)."""
        tree = self.open.pop(agent_id, None)
        if tree is not None:
            with anyio.CancelScope(shield=True), contextlib.suppress(WorktreeError):
                await self.worktrees.remove(tree)

    def resumed(self, agent_id: str) -> Worktree:
        """The worktree of an agent resumed after a restart, from its record."""
        tree = self.worktrees.get(agent_id)
        if tree is None or not tree.path.is_dir():
            where = f" ({tree.path})" if tree is not None else ""
            raise not_found(
                f"the worktree of the persisted session {agent_id}{where} is gone: "
                "open a new session"
            )
        self.open[agent_id] = tree
        return tree

    async def close(self, agent_id: str, journal: Journal | None) -> dict[str, Any] | None:
        """End the agent's worktree: removed when unchanged, kept (and said so) otherwise.

        ``{"path", "branch", "base", "kept", "changes"}``, or ``None`` for an
        agent without one; the audit log gets it as a ``worktree`` record.  A
        worktree git cannot read is kept.
        """
        tree = self.open.pop(agent_id, None)
        if tree is None:
            return None
        with anyio.CancelScope(shield=True):
            try:
                state = await self.worktrees.finish(tree)
            except WorktreeError as error:
                logger.warning("worktree %s kept: %s", tree.path, error)
                kept, changes = True, f"git could not read it: {error.reason}"
            else:
                kept, changes = state.changed, state.describe()
        if kept:
            text = (
                f"worktree kept: {tree.path} on branch {tree.branch} ({changes}; base "
                f"{tree.base[:12]}); merge the branch, or remove both: git worktree remove "
                f"--force {tree.path} && git branch -D {tree.branch}"
            )
            if journal is not None:
                journal.append({"type": "note", "text": text})
            logger.info("agent %s: %s", agent_id, text)
        ended = {**tree.to_wire(), "kept": kept, "changes": changes}
        if self.audit is not None:
            self.audit.record("worktree", agent_id, **ended)
        return ended

    # -- all of them (oma-bridge worktrees) ------------------------------------------------------

    async def rows(
        self, open_ids: Container[str], resumable: Container[str]
    ) -> list[dict[str, Any]]:
        """Every worktree with its agent's state (``open``, ``resumable``, ``gone``) and changes."""
        rows = []
        for tree in await anyio.to_thread.run_sync(self.worktrees.records):
            row: dict[str, Any] = {
                "agentId": tree.name,
                **tree.to_wire(),
                "repository": str(tree.repository),
                "profile": tree.owner,
                "createdAt": tree.created_at,
                "agent": _agent_state(tree.name, open_ids, resumable),
            }
            try:
                state = await self.worktrees.state(tree)
            except WorktreeError as error:
                row |= {"changed": True, "changes": f"git could not read it: {error.reason}"}
            else:
                row |= state.to_wire()
            rows.append(row)
        return rows

    async def prune(self, open_ids: Container[str], resumable: Container[str]) -> dict[str, Any]:
        """Remove the worktrees whose agent is gone and that have no change."""
        removed, kept = [], []
        for row in await self.rows(open_ids, resumable):
            if row["agent"] == "gone" and not row["changed"]:
                tree = self.worktrees.get(row["agentId"])
                if tree is not None:
                    await self.worktrees.remove(tree)
                    removed.append(row)
                    continue
            kept.append(row)
        return {"removed": removed, "kept": kept}


def _agent_state(name: str, open_ids: Container[str], resumable: Container[str]) -> str:
    if name in open_ids:
        return "open"
    return "resumable" if name in resumable else "gone"


def _common_git_dir(tree: Worktree) -> Path | None:
    """The repository's git folder, from the worktree's ``.git`` file (``gitdir: …/N``)."""
    with contextlib.suppress(OSError):
        line = (tree.path / ".git").read_text().strip()
        if line.startswith("gitdir:"):
            own = Path(line.removeprefix("gitdir:").strip())
            if own.parent.name == "worktrees":
                return own.parent.parent
    return None
