"""Messages that name the fix (PROTOCOL §18.3): the sentences a user reads when the
daemon refuses, each saying what to change and where.

- :func:`no_such_profile`: an unknown profile name, with the profiles there
  are and the nearest one (``did you mean "echo"?``);
- :func:`outside_the_roots`: a client folder outside ``[server]
  workspace_roots``, naming the roots, the key, the config file to put the
  folder in, and that a restart applies it (``[server]`` is read at start).

A missing provider key is :func:`oma_bridge.provider_keys.key_not_set`; a
config value of the wrong type, :mod:`oma_bridge.server.config_words`.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Sequence
from pathlib import Path

from oma_bridge.paths import default_config_path
from oma_bridge.server.config import EMBEDDED_SOURCE
from oma_bridge.server.config_append import toml_string

__all__ = ["no_such_profile", "outside_the_roots"]


def no_such_profile(name: str, names: Collection[str]) -> str:
    """``no agent profile named "ecoh"; did you mean "echo"? (the profiles: demo, echo)``."""
    ordered = sorted(names)
    if not ordered:
        return f'no agent profile named "{name}": the config declares none'
    nearest = difflib.get_close_matches(name, ordered, n=1, cutoff=0.6)
    guess = f'; did you mean "{nearest[0]}"?' if nearest else ""
    return f'no agent profile named "{name}"{guess} (the profiles: {", ".join(ordered)})'


def outside_the_roots(cwd: str, real: Path, roots: Sequence[Path], config_source: str) -> str:
    """Why ``cwd`` (``real`` once resolved) is refused, and how to allow it."""
    shown = ", ".join(str(root) for root in roots) or "none"
    if config_source == EMBEDDED_SOURCE:
        # The built-in config has no file to edit: the user's own config is
        # the file the daemon reads at its next start instead.
        where = f"{default_config_path()} (the daemon runs on its built-in config now)"
    else:
        where = config_source
    listed = ", ".join(toml_string(str(folder)) for folder in [*roots, real])
    return (
        f"cwd {cwd} is outside the workspace roots ({shown}); to allow it, add it to "
        f"[server] workspace_roots in {where}: workspace_roots = [{listed}], "
        "then restart the daemon"
    )
