"""Where the daemon's files live by default: its socket, discovery file, state folder, config.

Shared by the daemon and its clients (which find it through the discovery file).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "DISCOVERY_NAME",
    "LOCK_NAME",
    "SOCKET_NAME",
    "SYSTEM_ROOT_VARIABLE",
    "default_config_path",
    "default_runtime_dir",
    "default_socket_path",
    "default_state_dir",
    "fallback_runtime_dir",
    "system_path",
]

SOCKET_NAME = "bridge.sock"
DISCOVERY_NAME = "bridge.json"
#: Held (flock) by the running daemon: one daemon per folder.
LOCK_NAME = "bridge.lock"


#: For tests: the fixed system folders (``/run/user/$UID``, ``/tmp/oma-bridge-$UID``)
#: are taken under this folder instead of ``/`` (docs/client.md, "Finding the daemon"),
#: so that a test makes its own and never meets the machine's.
SYSTEM_ROOT_VARIABLE = "OMA_BRIDGE_SYSTEM_ROOT"


def system_path(path: str) -> Path:
    """The absolute ``path``, under ``$OMA_BRIDGE_SYSTEM_ROOT`` when that is set."""
    root = os.environ.get(SYSTEM_ROOT_VARIABLE)
    return Path(root.rstrip("/") + path) if root else Path(path)


def fallback_runtime_dir() -> Path:
    """``/tmp/oma-bridge-$UID``: the daemon's folder when ``XDG_RUNTIME_DIR`` is not set."""
    return system_path(f"/tmp/oma-bridge-{os.getuid()}")


def default_runtime_dir() -> Path:
    """``$XDG_RUNTIME_DIR/oma-bridge``, else ``/tmp/oma-bridge-$UID``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "oma-bridge"
    return fallback_runtime_dir()


def default_socket_path() -> Path:
    """The socket path that ``socket = "auto"`` stands for."""
    return default_runtime_dir() / SOCKET_NAME


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/oma-bridge``, else ``~/.local/state/oma-bridge``."""
    state = os.environ.get("XDG_STATE_HOME")
    return (Path(state) if state else Path.home() / ".local" / "state") / "oma-bridge"


def default_config_path() -> Path:
    """``$XDG_CONFIG_HOME/oma-bridge/config.toml`` (``~/.config/...`` without the variable)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "oma-bridge" / "config.toml"
