"""Where the daemon's files live by default: its socket, discovery file and state folder.

Shared by the daemon and its clients (which find it through the discovery file).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "DISCOVERY_NAME",
    "LOCK_NAME",
    "SOCKET_NAME",
    "default_runtime_dir",
    "default_socket_path",
    "default_state_dir",
]

SOCKET_NAME = "bridge.sock"
DISCOVERY_NAME = "bridge.json"
#: Held (flock) by the running daemon: one daemon per folder.
LOCK_NAME = "bridge.lock"


def default_runtime_dir() -> Path:
    """``$XDG_RUNTIME_DIR/oma-bridge``, else ``/tmp/oma-bridge-$UID``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "oma-bridge"
    return Path(f"/tmp/oma-bridge-{os.getuid()}")


def default_socket_path() -> Path:
    """The socket path that ``socket = "auto"`` stands for."""
    return default_runtime_dir() / SOCKET_NAME


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/oma-bridge``, else ``~/.local/state/oma-bridge``."""
    state = os.environ.get("XDG_STATE_HOME")
    return (Path(state) if state else Path.home() / ".local" / "state") / "oma-bridge"
