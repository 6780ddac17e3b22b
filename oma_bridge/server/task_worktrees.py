"""A worktree per task of ``oma/runTasks`` whose assignee has ``cwd = "worktree"`` (PROTOCOL §19.2).

The library runs a team's tasks on its members, one member per name, one
task at a time each.  A task of a worktree profile must have a folder of
its own, so each such task becomes a member of its own for the library: a
fresh agent id (``agt_…``, the worktree's name and ``oma/<id>`` its branch)
whose config is the profile's with the worktree as its folder.  The
daemon's answer and its ``oma/progress`` events name the profile again (the
task's ``assignee``, the event's ``agent``), and each such task's result
carries ``"worktree": {"path", "branch", "base", "kept", "changes"}``.

Every task is checked before anything is made (-32602: a worktree task
without ``cwd``, a ``cwd`` on a task whose assignee takes none); then the
worktrees are made, at the HEAD of each task's repository when the request
arrives; they are ended when the run ends (removed when unchanged, a
skipped task's included; kept otherwise), or at once when the run never
started.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from oma_bridge.agent import AgentConfig
from oma_bridge.isolation import Worktree
from oma_bridge.orchestration.tasks import PlannedTask
from oma_bridge.server.profiles import Profile
from oma_bridge.server.worktrees import AgentWorktrees, is_worktree_profile
from oma_bridge.wire.codes import invalid_params
from oma_bridge.wire.params import TaskParams

__all__ = ["TaskWorktrees"]

#: Builds a member's config: (profile name, profile, backend fields) -> config.
MemberConfig = Callable[[str, Profile, Mapping[str, Any]], AgentConfig]


class TaskWorktrees:
    """The worktrees of one ``oma/runTasks`` (see the module docstring)."""

    def __init__(self, worktrees: AgentWorktrees) -> None:
        self.worktrees = worktrees
        #: Member name (an agent id) -> the profile it is of.
        self.members: dict[str, str] = {}
        #: Task id -> its member.
        self.by_task: dict[str, str] = {}
        self.trees: dict[str, Worktree] = {}
        #: Member -> what became of its worktree, once the run ended.
        self.ended: dict[str, dict[str, Any]] = {}

    @staticmethod
    def check(
        requested: Sequence[TaskParams],
        planned: Sequence[PlannedTask],
        profiles: Mapping[str, Profile],
    ) -> None:
        """-32602, one item per task, for a ``cwd`` missing or out of place."""
        errors = []
        for task in planned:
            cwd = requested[task.index].cwd
            worktree = is_worktree_profile(profiles[task.assignee])
            if worktree and cwd is None:
                msg = (
                    f'task "{task.title}": its assignee "{task.assignee}" runs in a git worktree '
                    '(cwd = "worktree"): give the task a "cwd" in a git repository'
                )
            elif not worktree and cwd is not None:
                msg = (
                    f'task "{task.title}": a task\'s "cwd" is for an assignee with cwd = '
                    f'"worktree", and "{task.assignee}" has none'
                )
            else:
                continue
            errors.append({"loc": ["tasks", task.index, "cwd"], "msg": msg, "type": "worktree"})
        if errors:
            raise invalid_params(errors)

    async def make(
        self,
        requested: Sequence[TaskParams],
        planned: Sequence[PlannedTask],
        profiles: Mapping[str, Profile],
        wire_tasks: list[dict[str, Any]],
        member_config: MemberConfig,
    ) -> dict[str, AgentConfig]:
        """Make each worktree task's worktree; its member's config by name.

        ``wire_tasks`` (the library's tasks, in request order) get the
        members' names as their assignees.  A failure removes what was made.
        """
        members: dict[str, AgentConfig] = {}
        try:
            for task in planned:
                profile = profiles[task.assignee]
                if not is_worktree_profile(profile):
                    continue
                member = "agt_" + secrets.token_hex(8)
                tree, _ = await self.worktrees.make(
                    member, task.assignee, profile, requested[task.index].cwd
                )
                self.members[member], self.by_task[task.id] = task.assignee, member
                self.trees[member] = tree
                update = self.worktrees.backend_update(profile, tree)
                members[member] = member_config(task.assignee, profile, update)
                wire_tasks[task.index] = {**wire_tasks[task.index], "assignee": member}
        except BaseException:
            await self.end()
            raise
        return members

    async def end(self) -> dict[str, dict[str, Any]]:
        """End every worktree not ended yet; what became of those, by member."""
        now: dict[str, dict[str, Any]] = {}
        for member in list(self.trees):
            if member not in self.ended:
                ended = await self.worktrees.close(member, None)
                now[member] = self.ended[member] = ended or self.trees[member].to_wire()
        return now

    def event(self, event: dict[str, Any]) -> dict[str, Any]:
        """An ``oma/progress`` event that names the profile, not the member."""
        agent = event.get("agent")
        if agent not in self.members:
            return event
        event = {**event, "agent": self.members[agent]}
        data = event.get("data")
        if isinstance(data, dict) and data.get("assignee") in self.members:
            event["data"] = {**data, "assignee": self.members[data["assignee"]]}
        return event

    def answer(self, wire: dict[str, Any]) -> dict[str, Any]:
        """The run's answer with each worktree task's assignee and ``worktree``."""
        tasks = []
        for task in wire.get("tasks", []):
            member = self.by_task.get(task.get("id"))
            if member is not None:
                tree = self.ended.get(member) or self.trees[member].to_wire()
                task = {**task, "assignee": self.members[member], "worktree": tree}
            tasks.append(task)
        return {**wire, "tasks": tasks}
