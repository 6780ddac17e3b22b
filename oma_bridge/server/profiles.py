"""What clients may learn about the declared agent profiles: ``AgentProfileInfo``.

Exactly ``{"name", "kind", "description"?, "model"?}`` (PROTOCOL §4, §11.27):
nothing about commands, arguments, environments or folders leaves the
daemon.  This module is also where a profile will be turned into the
library's ``AgentConfig`` (and the process/ACP backend configs) when agent
methods are plugged in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .config import AcpProfile, LlmProfile, ProcessProfile

__all__ = ["agent_profile_info", "agent_profile_infos"]

Profile = LlmProfile | ProcessProfile | AcpProfile


def agent_profile_info(name: str, profile: Profile) -> dict[str, Any]:
    """The public view of one profile."""
    info: dict[str, Any] = {"name": name, "kind": profile.kind}
    if profile.description is not None:
        info["description"] = profile.description
    model = profile.model if isinstance(profile, LlmProfile | AcpProfile) else None
    if model is not None:
        info["model"] = model
    return info


def agent_profile_infos(agents: Mapping[str, Profile]) -> list[dict[str, Any]]:
    """The public view of every profile, in config order."""
    return [agent_profile_info(name, profile) for name, profile in agents.items()]
