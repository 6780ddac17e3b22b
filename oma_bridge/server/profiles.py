"""Declared agent profiles: their public view, and the library config they stand for.

:func:`agent_profile_info` is what clients may learn: exactly ``{"name",
"kind", "description"?, "model"?}`` (docs/contract.md §4, §11.27); nothing about
commands, arguments, environments or folders leaves the daemon.

:func:`profile_agent_config` turns a profile into the library's
:class:`~oma_bridge.agent.AgentConfig` (with a ``ProcessConfig`` or
``AcpConfig`` backend for external kinds).  ``timeout_s`` goes to the
backend config of external kinds and to ``timeout_ms`` of an LLM agent;
``stop_grace_s`` falls back to the ``[server]`` value (docs/contract.md §11.37).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oma_bridge.agent import AgentConfig
from oma_bridge.server.config import AcpProfile, LlmProfile, ProcessProfile, ServerSection

__all__ = ["agent_profile_info", "agent_profile_infos", "profile_agent_config"]

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


def profile_agent_config(name: str, profile: Profile, server: ServerSection) -> AgentConfig:
    """The :class:`AgentConfig` of profile ``name`` (overrides are the caller's to apply)."""
    common: dict[str, Any] = {
        "name": name,
        "description": profile.description,
        "system_prompt": profile.system_prompt,
    }
    if isinstance(profile, LlmProfile):
        llm = profile.model_dump(exclude={"kind", "description", "system_prompt", "timeout_s"})
        if profile.max_turns is None:
            del llm["max_turns"]
        timeout_ms = None if profile.timeout_s is None else round(profile.timeout_s * 1000)
        return AgentConfig(**common, **llm, timeout_ms=timeout_ms)
    external: dict[str, Any] = {
        "command": profile.command,
        "args": profile.args,
        # Secrets the profile asked for come from the daemon's environment;
        # its own ``env`` entries win over them.
        "env": {
            **{name: os.environ[name] for name in profile.pass_env if name in os.environ},
            **profile.env,
        },
        "timeout_s": profile.timeout_s,
    }
    # The backends are imported when a profile of their kind is first built,
    # not at start-up (the ACP package alone costs ~30 ms of import time).
    if isinstance(profile, ProcessProfile):
        from oma_bridge.backends.process.config import ProcessConfig

        process = ProcessConfig(
            **external,
            cwd=str(profile.cwd) if isinstance(profile.cwd, Path) else None,
            input=profile.input,
            stop_grace_s=server.stop_grace_s
            if profile.stop_grace_s is None
            else profile.stop_grace_s,
            **{
                key: value
                for key in ("max_output_bytes", "stderr_tail_bytes")
                if (value := getattr(profile, key)) is not None
            },
        )
        return AgentConfig(**common, backend=process)
    from oma_bridge.backends.acp.config import AcpConfig

    acp = AcpConfig(
        **external,
        cwd=profile.cwd if isinstance(profile.cwd, Path) else None,
        permission=profile.permission,
        fs=profile.fs,
        terminal=profile.terminal,
        model=profile.model,
        auth_method=profile.auth_method,
        mcp_servers=profile.mcp_servers,
        cancel_grace_s=profile.cancel_grace_s,
        coalesce_text=profile.coalesce_text,
        stop_grace_s=server.stop_grace_s if profile.stop_grace_s is None else profile.stop_grace_s,
    )
    return AgentConfig(**common, backend=acp)
