"""From a registry entry to the command that starts the agent (PROTOCOL §22.1).

* ``npx``: ``npx -y PACKAGE[@VERSION] ARGS``: the package as the entry pins
  it, or at the profile's ``version``;
* ``uvx``: ``uvx PACKAGE ARGS`` (``uvx NAME@VERSION ARGS`` with a ``version``);
* ``binary``: the local file ``binary_path`` names (the user downloaded the
  entry's archive for this platform); when the entry gives a ``sha256`` for
  this platform the file is checked against it before every spawn.

``ARGS`` are the entry's, then the profile's; the environment is the
entry's, under the profile's.  Nothing is ever a shell line: the command and
each argument are separate strings, taken from a checked entry
(:mod:`.registry`).  A profile with ``binary_path`` takes the binary; one
without takes ``npx``, else ``uvx``, and an entry with only a binary needs
``binary_path``.
"""

from __future__ import annotations

import platform as platform_module
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from oma_bridge.acp_registry.registry import BinaryTarget, DistributionKind, Entry

__all__ = ["Launch", "LaunchError", "launch", "this_platform"]

_OS = {"linux": "linux", "darwin": "darwin", "win32": "windows"}
_MACHINE = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


class LaunchError(Exception):
    """A profile the entry cannot start: ``key`` is the profile's key at fault (or ``""``)."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(problem)


@dataclass(frozen=True)
class Launch:
    """How to start one registry agent: exec'd as it is, never through a shell."""

    distribution: DistributionKind
    command: str
    args: tuple[str, ...]
    env: Mapping[str, str]
    #: The executable's SHA-256 to check before each spawn (a binary's, when given).
    sha256: str | None = None


def this_platform() -> str | None:
    """This machine as the registry names platforms (``linux-x86_64``), or ``None``."""
    os_name = _OS.get(sys.platform)
    machine = _MACHINE.get(platform_module.machine().lower())
    return f"{os_name}-{machine}" if os_name and machine else None


def launch(
    entry: Entry,
    *,
    version: str | None = None,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    binary_path: Path | None = None,
    platform: str | None = None,
) -> Launch:
    """The command of ``entry`` with a profile's choices (see the module docstring)."""
    overlay = dict(env or {})
    if binary_path is not None:
        return _binary(entry, version, args, overlay, binary_path, platform or this_platform())
    for kind in ("npx", "uvx"):
        package = entry.packages.get(kind)
        if package is None:
            continue
        spec = package.package if version is None else f"{package.name}@{version}"
        command = ("npx", "-y", spec) if kind == "npx" else ("uvx", spec)
        return Launch(
            kind,
            command[0],
            (*command[1:], *package.args, *args),
            {**package.env, **overlay},
        )
    target = _target(entry, platform or this_platform())
    raise LaunchError(
        "binary_path",
        f"the registry entry {entry.id!r} is a binary ({target.platform}: {target.archive}): "
        "download and unpack it, and set binary_path to its executable "
        f"({target.cmd} in the archive)",
    )


def _binary(
    entry: Entry,
    version: str | None,
    args: Sequence[str],
    env: Mapping[str, str],
    path: Path,
    platform: str | None,
) -> Launch:
    target = _target(entry, platform)
    if version is not None and version != entry.version:
        raise LaunchError(
            "version",
            f"a binary is the file at binary_path, of the entry's version {entry.version}; "
            "version applies to npx and uvx distributions only",
        )
    return Launch("binary", str(path), (*target.args, *args), {**target.env, **env}, target.sha256)


def _target(entry: Entry, platform: str | None) -> BinaryTarget:
    if not entry.binaries:
        raise LaunchError(
            "binary_path",
            f"the registry entry {entry.id!r} has no binary distribution "
            f"(it has {', '.join(entry.distributions)}); remove binary_path",
        )
    target = entry.binaries.get(platform or "")
    if target is None:
        raise LaunchError(
            "binary_path",
            f"the registry entry {entry.id!r} has no binary for this platform "
            f"({platform or sys.platform}); it has {', '.join(sorted(entry.binaries))}",
        )
    return target
