"""A client's folder for a ``cwd = "client"`` or ``"worktree"`` profile (PROTOCOL §12.4, §19.2).

One check for the facade's ``session/new``, ``agent/open``'s ``cwd`` and a
team task's ``cwd``: an absolute path whose real path is inside one of
``[server] workspace_roots`` (else -32012, naming the roots, the key and the
config file: :func:`~oma_bridge.server.fixes.outside_the_roots`) and a
folder (else -32602).
"""

from __future__ import annotations

import os
from pathlib import Path

from oma_bridge.errors import WireError
from oma_bridge.rpc.codes import INVALID_PARAMS
from oma_bridge.server.config import ServerConfig
from oma_bridge.server.fixes import outside_the_roots
from oma_bridge.wire.codes import forbidden

__all__ = ["check_inside_roots", "client_folder"]


def client_folder(cwd: object, config: ServerConfig, profile_name: str) -> str:
    """The real path of the client's ``cwd`` for a profile that runs in it."""
    if not isinstance(cwd, str) or not cwd or not Path(cwd).is_absolute():
        raise WireError(
            INVALID_PARAMS,
            f'profile "{profile_name}" runs in the client\'s folder: cwd must be absolute',
        )
    real = Path(os.path.realpath(cwd))
    check_inside_roots(real, config, cwd)
    if not real.is_dir():
        raise WireError(INVALID_PARAMS, f"cwd {cwd} is not a folder")
    return str(real)


def check_inside_roots(real: Path, config: ServerConfig, cwd: str, what: str = "") -> None:
    """-32012 unless ``real`` is inside a root; ``what`` names it when it is not ``cwd`` itself."""
    roots = [Path(os.path.realpath(root)) for root in config.server.workspace_roots]
    if not any(real == root or root in real.parents for root in roots):
        why = outside_the_roots(cwd, real, roots, config.source)
        raise forbidden(f"{what}: {why}" if what else why)
