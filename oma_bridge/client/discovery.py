"""Finding the local daemon (PROTOCOL §18.2): the discovery files, in order, and which is live.

One lookup for the command line, the Python client and the ACP shim:

1. ``--url`` (or ``$OMA_BRIDGE_URL``): :func:`url_from_environment`; the
   callers take it before any file;
2. ``$XDG_RUNTIME_DIR/oma-bridge/bridge.json``;
3. ``/run/user/$UID/oma-bridge/bridge.json``, when ``/run/user/$UID`` exists,
   belongs to this user and is 0700: systemd's runtime folder, which an
   editor or an SDK that starts the shim with a trimmed environment (the
   Python SDK keeps HOME, LOGNAME, PATH, SHELL, TERM and USER) no longer
   names, so the shim still finds the user's systemd daemon;
4. ``/tmp/oma-bridge-$UID/bridge.json``, where a daemon started without
   ``XDG_RUNTIME_DIR`` puts its files.

A file whose pid is gone is stale: not a daemon, the lookup goes on.  The
fixed folders of 3 and 4 are taken under ``$OMA_BRIDGE_SYSTEM_ROOT`` when
it is set (:data:`oma_bridge.paths.SYSTEM_ROOT_VARIABLE`, for tests).

Standard library only (and :mod:`oma_bridge.client.errors`): the shim
imports it and starts before anyio, websockets' client or the rpc peer.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from oma_bridge.client.errors import DaemonNotRunningError
from oma_bridge.paths import DISCOVERY_NAME, fallback_runtime_dir, system_path

__all__ = [
    "URL_VARIABLE",
    "Discovery",
    "discovery_folders",
    "find_daemon",
    "find_daemons",
    "read_discovery",
    "url_from_environment",
]

#: A daemon's URL for every command and client that is given none (§18.2, first place).
URL_VARIABLE = "OMA_BRIDGE_URL"

_HINT = "start one with `oma-bridge serve`"


@dataclass(frozen=True)
class Discovery:
    """The daemon's ``bridge.json``: where it listens (its socket, its TCP URL) and its token."""

    pid: int
    version: str
    protocol_version: int
    socket: str | None
    url: str | None
    token: str
    path: Path


def url_from_environment(url: str | None = None) -> str | None:
    """``url`` when given (``--url``), else ``$OMA_BRIDGE_URL`` (unset or empty: ``None``)."""
    return url or os.environ.get(URL_VARIABLE) or None


def discovery_folders() -> tuple[list[Path], list[str]]:
    """The folders to look in, in the order of §18.2, and why a fixed one was passed over."""
    folders: list[Path] = []
    passed_over: list[str] = []
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        folders.append(Path(runtime) / "oma-bridge")
    user = system_path(f"/run/user/{os.getuid()}")
    problem = _not_private(user)
    if problem is None:
        folders.append(user / "oma-bridge")
    elif problem:
        passed_over.append(f"{user} {problem}")
    folders.append(fallback_runtime_dir())
    unique = [folder for i, folder in enumerate(folders) if folder not in folders[:i]]
    return unique, passed_over


def _not_private(folder: Path) -> str | None:
    """``None`` for a folder of this user's own, mode 0700; ``""`` when there is none;
    else what is wrong with it."""
    try:
        info = folder.lstat()
    except OSError:
        return ""
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if info.st_uid != os.getuid():
        return "belongs to another user"
    if stat.S_IMODE(info.st_mode) != 0o700:
        return f"is mode {stat.S_IMODE(info.st_mode):04o}, not 0700"
    return None


def read_discovery(folder: Path | str) -> Discovery:
    """The live daemon whose discovery file is in ``folder``; else :class:`DaemonNotRunningError`
    whose one reason says why not (no file, unreadable, malformed, its pid gone)."""
    path = Path(folder) / DISCOVERY_NAME
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise _none(f"no discovery file at {path}") from None
    except (OSError, ValueError) as error:
        raise _none(f"cannot read the discovery file {path}: {error}") from None
    try:
        if not isinstance(data, dict):
            raise TypeError("not a JSON object")
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
        raise _none(f"the discovery file {path} is malformed: {error}") from None
    try:
        os.kill(discovery.pid, 0)
    except ProcessLookupError:
        raise _none(f"the discovery file {path} names pid {discovery.pid}, which is gone") from None
    except PermissionError:
        pass  # alive, owned by someone else: the socket's permissions decide
    return discovery


def find_daemons(discovery_dir: Path | str | None = None) -> tuple[list[Discovery], list[str]]:
    """The live daemons, in the order of §18.2 (only ``discovery_dir`` when given), and why
    each other place holds none.  A caller connects to the first that answers."""
    reasons: list[str]
    if discovery_dir is not None:
        folders, reasons = [Path(discovery_dir)], []
    else:
        folders, reasons = discovery_folders()
    found: list[Discovery] = []
    for folder in folders:
        try:
            found.append(read_discovery(folder))
        except DaemonNotRunningError as error:
            reasons.extend(error.reasons)
    return found, reasons


def find_daemon(discovery_dir: Path | str | None = None) -> Discovery:
    """The first live daemon of :func:`find_daemons`; :class:`DaemonNotRunningError`, naming
    every place looked at, when there is none."""
    found, reasons = find_daemons(discovery_dir)
    if not found:
        raise no_daemon(reasons)
    return found[0]


def no_daemon(reasons: list[str]) -> DaemonNotRunningError:
    """No daemon answers anywhere: the error that says where the client looked."""
    return DaemonNotRunningError(
        f"no oma-bridge daemon is running ({'; '.join(reasons)}); {_HINT}", reasons=reasons
    )


def _none(reason: str) -> DaemonNotRunningError:
    return DaemonNotRunningError(reason, reasons=[reason])
