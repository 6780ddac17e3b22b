"""``registry = "<id>"`` acp profiles turned into commands when the config is read (§22.1).

Each such profile's entry is looked up in ``[server] acp_registry`` (or the
snapshot the package ships), and the profile is replaced by a copy whose
``command``, ``args``, ``env`` and ``command_sha256`` say how to start it
(:func:`oma_bridge.acp_registry.launch`); without a ``description`` of its
own it takes the entry's.  So the rest of the daemon sees an acp profile like
any other, and a reload (SIGHUP) reads the registry again.  A problem is a
:class:`RegistryProfileError` naming the profile's key: a registry that
cannot be read (``server.acp_registry``), an id it does not have or an entry
it refuses (``agents.NAME.registry``, with the file and the entry's JSON
path), a profile the entry cannot start (``binary_path``, ``version``).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from oma_bridge.acp_registry import LaunchError, Registry, RegistryError, launch, load_registry

__all__ = ["RegistryProfileError", "resolve_registry_profiles"]


class RegistryProfileError(Exception):
    """A registry profile that cannot be used: ``key`` (dotted) and the problem."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"{key}: {problem}")


def resolve_registry_profiles(agents: MutableMapping[str, Any], registry_path: Path | None) -> None:
    """Replace every registry profile of ``agents`` by its resolved copy (in place)."""
    registry: Registry | None = None
    for name, profile in list(agents.items()):
        if profile.kind != "acp":
            continue
        entry_id = profile.registry
        if entry_id is None:
            _check_command_profile(name, profile)
            continue
        if profile.command is not None:
            continue  # resolved already
        if registry is None:
            try:
                registry = load_registry(registry_path)
            except RegistryError as error:
                key = "server.acp_registry" if registry_path is not None else f"agents.{name}"
                raise RegistryProfileError(key, str(error)) from None
        try:
            entry = registry.entry(entry_id)
            started = launch(
                entry,
                version=profile.version,
                args=profile.args,
                env=profile.env,
                binary_path=profile.binary_path,
            )
        except RegistryError as error:
            raise RegistryProfileError(f"agents.{name}.registry", str(error)) from None
        except LaunchError as error:
            raise RegistryProfileError(f"agents.{name}.{error.key}", error.problem) from None
        sha256 = _checksum(name, profile.command_sha256, started.sha256, started.distribution)
        update: dict[str, Any] = {
            "command": started.command,
            "args": started.args,
            "env": dict(started.env),
            "command_sha256": sha256,
        }
        if profile.description is None:
            update["description"] = f"{entry.name}: {entry.description}"
        agents[name] = profile.model_copy(update=update)


def _check_command_profile(name: str, profile: Any) -> None:
    """An acp profile without ``registry``: it needs ``command`` (or ``url``, a remote
    agent, which is handed nothing of this daemon's environment), and takes no
    registry key."""
    for key in ("version", "binary_path"):
        if getattr(profile, key) is not None:
            raise RegistryProfileError(f"agents.{name}.{key}", "goes with registry, not command")
    if profile.url is not None:
        if profile.pass_env:
            raise RegistryProfileError(
                f"agents.{name}.pass_env",
                "a remote agent (url) is started elsewhere: nothing of this "
                "daemon's environment reaches it",
            )
        return
    if profile.command is None:
        raise RegistryProfileError(
            f"agents.{name}.command",
            "required key is missing (or registry, the id of an ACP registry agent, "
            "or url, a remote agent's)",
        )


def _checksum(name: str, own: str | None, entry: str | None, distribution: str) -> str | None:
    """The profile's ``command_sha256`` and the entry's, which must agree."""
    if own is None:
        return entry
    if distribution != "binary":
        raise RegistryProfileError(
            f"agents.{name}.command_sha256",
            f"checks a binary; this profile runs the {distribution} distribution",
        )
    if entry is not None and own.lower() != entry:
        raise RegistryProfileError(
            f"agents.{name}.command_sha256",
            f"differs from the sha256 the registry entry gives for this platform ({entry})",
        )
    return own.lower()
