"""A profile plus a client's overrides: the :class:`AgentConfig` of one daemon agent.

A client can rename, re-prompt and narrow an agent, never choose what runs
or where (``docs/protocol.md``, rule 11.8): the keys below are refused with
-32012 before the shape check, and a timeout or budget override can only
narrow the profile's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oma_bridge.agent import AgentConfig
from oma_bridge.agent.config import smallest_ceiling
from oma_bridge.backends import text_only
from oma_bridge.server.config import ServerSection
from oma_bridge.server.profiles import Profile, profile_agent_config
from oma_bridge.server.worktrees import is_worktree_profile, needs_worktree
from oma_bridge.wire.codes import forbidden
from oma_bridge.wire.params import AgentOverrides

__all__ = ["FORBIDDEN_OVERRIDES", "agent_config", "check_forbidden"]

#: Keys a client may never set: they choose what runs and where.
FORBIDDEN_OVERRIDES = frozenset(
    {"command", "args", "env", "cwd", "kind", "provider", "base_url", "api_key_env"}
)


def check_forbidden(params: Any, *path: str) -> None:
    """-32012 for the keys that choose what runs, before the shape check."""
    node = params
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    if isinstance(node, Mapping):
        chosen = sorted(FORBIDDEN_OVERRIDES.intersection(node))
        if chosen:
            raise forbidden(f"a client cannot set {', '.join(chosen)}: they come from the profile")


def agent_config(
    profile_name: str,
    profile: Profile,
    settings: ServerSection,
    overrides: AgentOverrides | None,
    labels: Mapping[str, str],
    *,
    history: list[Any] | None = None,
    backend_update: Mapping[str, Any] | None = None,
) -> AgentConfig:
    """The profile's config with the client's overrides and the daemon's supervisor labels.

    ``history`` (a restored session's) wins over the overrides' own;
    ``backend_update`` sets backend fields the daemon chose (an ACP client's
    folder, its MCP servers, a downstream session to continue).  An
    invalid history raises :class:`~oma_bridge.errors.InvalidMessageError`;
    a ``cwd = "worktree"`` profile without its worktree's ``cwd`` there is
    refused (-32602), never run in the daemon's own folder.
    """
    if is_worktree_profile(profile) and "cwd" not in (backend_update or {}):
        raise needs_worktree(profile_name, "this request")  # never the daemon's own folder
    base = profile_agent_config(profile_name, profile, settings)
    overrides = overrides or AgentOverrides()
    update: dict[str, Any] = {}
    if overrides.name is not None:
        update["name"] = overrides.name
    if overrides.systemPrompt is not None:
        update["system_prompt"] = overrides.systemPrompt
    if overrides.maxTurns is not None:
        update["max_turns"] = overrides.maxTurns
    if overrides.timeoutMs is not None:  # narrows the profile's limit, never widens it
        update["timeout_ms"] = smallest_ceiling(base.timeout_ms, overrides.timeoutMs)
    if overrides.maxTokenBudget is not None:
        update["max_token_budget"] = smallest_ceiling(
            base.max_token_budget, overrides.maxTokenBudget
        )
    backend: Any = base.backend
    if text_only(backend.kind):
        changes = {"labels": {**backend.labels, **labels}, **(backend_update or {})}
        update["backend"] = backend.model_copy(update=changes)
    seeded = history if history is not None else overrides.history
    if seeded is not None:
        # AgentConfig guards it: an invalid history raises InvalidMessageError (-32010).
        return AgentConfig(**{**dict(base), **update, "history": seeded})
    return base.model_copy(update=update)
