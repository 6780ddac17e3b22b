"""The sentences of oma_bridge/server/fixes.py that the socket tests do not reach."""

from __future__ import annotations

from pathlib import Path

from oma_bridge.paths import default_config_path
from oma_bridge.server.config import EMBEDDED_SOURCE
from oma_bridge.server.fixes import no_such_profile, outside_the_roots


def test_no_such_profile_suggests_only_a_near_name() -> None:
    names = ["wordcount", "echo", "demo"]
    assert no_such_profile("ecoh", names) == (
        'no agent profile named "ecoh"; did you mean "echo"? (the profiles: demo, echo, wordcount)'
    )
    assert no_such_profile("zzz", names) == (
        'no agent profile named "zzz" (the profiles: demo, echo, wordcount)'
    )
    assert no_such_profile("x", []) == 'no agent profile named "x": the config declares none'


def test_outside_the_roots_under_the_built_in_config_names_the_user_config() -> None:
    message = outside_the_roots("/srv/p", Path("/srv/p"), [Path("/home/me")], EMBEDDED_SOURCE)
    assert message == (
        "cwd /srv/p is outside the workspace roots (/home/me); to allow it, add it to "
        f"[server] workspace_roots in {default_config_path()} (the daemon runs on its built-in "
        'config now): workspace_roots = ["/home/me", "/srv/p"], then restart the daemon'
    )
