"""The discovery file ``bridge.json``: where the local daemon is, and its token."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import orjson

from oma_bridge.client.errors import DaemonNotRunningError
from oma_bridge.paths import DISCOVERY_NAME, default_runtime_dir

__all__ = ["Discovery", "find_daemon"]


@dataclass(frozen=True)
class Discovery:
    """The daemon's ``bridge.json``."""

    pid: int
    version: str
    protocol_version: int
    socket: str | None
    url: str | None
    token: str
    path: Path


def find_daemon(discovery_dir: Path | str | None = None) -> Discovery:
    """Read the discovery file and check that its daemon is alive."""
    folder = Path(discovery_dir) if discovery_dir is not None else default_runtime_dir()
    path = folder / DISCOVERY_NAME
    hint = "start one with `oma-bridge serve`"
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise DaemonNotRunningError(
            f"no oma-bridge daemon is running (no discovery file at {path}); {hint}"
        ) from None
    except (OSError, orjson.JSONDecodeError) as error:
        raise DaemonNotRunningError(f"cannot read the discovery file {path}: {error}") from None
    try:
        discovery = Discovery(
            pid=int(data["pid"]),
            version=str(data["version"]),
            protocol_version=int(data["protocolVersion"]),
            socket=data.get("socket"),
            url=data.get("url"),
            token=str(data["token"]),
            path=path,
        )
    except (KeyError, TypeError, ValueError) as error:
        raise DaemonNotRunningError(f"the discovery file {path} is malformed: {error}") from None
    try:
        os.kill(discovery.pid, 0)
    except ProcessLookupError:
        raise DaemonNotRunningError(
            f"no oma-bridge daemon is running (the discovery file {path} names pid "
            f"{discovery.pid}, which is gone); {hint}"
        ) from None
    except PermissionError:
        pass  # alive, owned by someone else: the socket's permissions decide
    return discovery
