"""Isolation of agents beyond the sandbox: a git worktree per agent (PROTOCOL §19.2)."""

from __future__ import annotations

from oma_bridge.isolation.worktrees import Worktree, Worktrees, WorktreeState

__all__ = ["Worktree", "WorktreeState", "Worktrees"]
