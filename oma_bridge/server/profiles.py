"""Declared agent profiles: their public view, and the library config they stand for.

:func:`agent_profile_info` is what clients may learn: exactly ``{"name",
"kind", "description"?, "model"?}`` (docs/contract.md §4, §11.27), ``"ready"``
and why not (``"notReady"``: a key variable that is not set, §18.3), for a
process or acp profile its ``"sandbox": {"kind", "network"}`` (§19.1), and
for an acp profile what its agent said it can do (PROTOCOL §22.2); nothing
about commands, arguments, environments or folders leaves the daemon.

:func:`profile_agent_config` turns a profile into the library's
:class:`~oma_bridge.agent.AgentConfig` with an ``LlmConfig``,
``ProcessConfig`` or ``AcpConfig`` backend.  A profile derives from its
backend's settings, so its backend keys carry over by name, with no mapping
to keep in step; the daemon adds only its own: ``timeout_s`` goes to the
backend config of external kinds and to ``timeout_ms`` of an LLM agent,
``pass_env`` into ``env``, a folder ``cwd`` as the backend holds it, and
``stop_grace_s`` falls back to the ``[server]`` value (docs/contract.md §11.37).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from oma_bridge.agent import AgentConfig
from oma_bridge.backends.acp.config import AcpConfig
from oma_bridge.backends.llm.config import LlmConfig
from oma_bridge.backends.process.config import ProcessConfig
from oma_bridge.provider_keys import missing_key
from oma_bridge.server.config import AcpProfile, LlmProfile, ProcessProfile, ServerSection

__all__ = ["agent_profile_info", "agent_profile_infos", "not_ready", "profile_agent_config"]

Profile = LlmProfile | ProcessProfile | AcpProfile


def not_ready(profile: Profile) -> str | None:
    """Why a run of ``profile`` would fail before it starts, ``None`` when it can run.

    An llm profile whose key variable is not set in the daemon's environment
    (PROTOCOL §18.3): ``ANTHROPIC_API_KEY is not set in the daemon's environment``.
    """
    if not isinstance(profile, LlmProfile):
        return None
    return missing_key(profile.provider, profile.api_key_env, profile.base_url)


def agent_profile_info(name: str, profile: Profile) -> dict[str, Any]:
    """The public view of one profile."""
    reason = not_ready(profile)
    info: dict[str, Any] = {"name": name, "kind": profile.kind, "ready": reason is None}
    if reason is not None:
        info["notReady"] = reason
    if profile.description is not None:
        info["description"] = profile.description
    model = profile.model if isinstance(profile, LlmProfile | AcpProfile) else None
    if model is not None:
        info["model"] = model
    if not isinstance(profile, LlmProfile):
        info["sandbox"] = profile.sandbox_info()
    return info


def agent_profile_infos(
    agents: Mapping[str, Profile],
    capabilities: Mapping[str, Mapping[str, Any]] | None = None,
    problems: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The public view of every profile, in config order.

    ``capabilities``: what each acp profile's agent said at its last
    ``initialize`` (PROTOCOL §22.2); ``problems``: why a probe could not
    start one (``probeError``).
    """
    infos = []
    for name, profile in agents.items():
        info = agent_profile_info(name, profile)
        if capabilities is not None and name in capabilities:
            info["capabilities"] = dict(capabilities[name])
        if problems is not None and name in problems:
            info["probeError"] = problems[name]
        infos.append(info)
    return infos


def profile_agent_config(name: str, profile: Profile, server: ServerSection) -> AgentConfig:
    """The :class:`AgentConfig` of profile ``name`` (overrides are the caller's to apply)."""
    common: dict[str, Any] = {
        "name": name,
        "description": profile.description,
        "system_prompt": profile.system_prompt,
    }
    if isinstance(profile, LlmProfile):
        agent = {
            key: value for key in _LLM_AGENT_KEYS if (value := getattr(profile, key)) is not None
        }
        timeout_ms = None if profile.timeout_s is None else round(profile.timeout_s * 1000)
        backend = _library_config(LlmConfig, profile)
        return AgentConfig(**common, **agent, timeout_ms=timeout_ms, backend=backend)
    settings: dict[str, Any] = {
        # Secrets the profile asked for come from the daemon's environment;
        # its own ``env`` entries win over them.
        "env": {
            **{name: os.environ[name] for name in profile.pass_env if name in os.environ},
            **profile.env,
        },
    }
    if "stop_grace_s" not in profile.model_fields_set:
        settings["stop_grace_s"] = server.stop_grace_s
    cwd = profile.cwd if isinstance(profile.cwd, Path) else None
    if isinstance(profile, ProcessProfile):
        process = _library_config(ProcessConfig, profile, cwd=str(cwd) if cwd else None, **settings)
        return AgentConfig(**common, backend=process)
    # A remote agent is kept alive, and reconnected, within the daemon's send timeout.
    settings["send_timeout_s"] = server.send_timeout_s
    return AgentConfig(**common, backend=_library_config(AcpConfig, profile, cwd=cwd, **settings))


#: The keys of an llm profile that are the agent's (``AgentConfig``), not its backend's.
_LLM_AGENT_KEYS = ("max_turns", "max_token_budget")

_Config = TypeVar("_Config", LlmConfig, ProcessConfig, AcpConfig)


def _library_config(config: type[_Config], profile: Profile, **daemon: Any) -> _Config:
    """The library config of ``profile``: its backend keys as they are, and the daemon's own.

    The profile declares no backend key of its own (it derives from the
    backend's settings, which declare them), and it validated them from the
    TOML: they are carried over, not validated again.
    """
    keys = config.model_fields.keys() & profile.model_fields_set
    values = {key: getattr(profile, key) for key in keys}
    values.update(daemon)
    return config.model_construct(**values)
