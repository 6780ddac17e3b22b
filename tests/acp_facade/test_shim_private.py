"""The shim's autostart under ``umask 000``: its log and the daemon it starts stay private."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

from .harness import OMA_BRIDGE, wait_for_discovery

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "t"}},
}


def test_autostart_under_umask_000_creates_nothing_others_can_touch(
    no_daemon: dict[str, str],
) -> None:
    done = subprocess.run(
        [OMA_BRIDGE, "acp", "echo"],
        input=(json.dumps(INITIALIZE) + "\n").encode(),
        env=no_daemon,
        capture_output=True,
        timeout=60,
        umask=0,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert "started a daemon" in done.stderr.decode()
    runtime = Path(no_daemon["XDG_RUNTIME_DIR"])
    wait_for_discovery(runtime, None)
    state_home = Path(no_daemon["XDG_STATE_HOME"])
    # From the first folder the shim made (the state folder's parent) down.
    made = state_home.parent
    assert (state_home / "oma-bridge" / "daemon.log").exists()
    paths = [made, *made.rglob("*"), runtime, *runtime.rglob("*")]
    wide = [
        f"{p}: {stat.S_IMODE(p.lstat().st_mode):04o}" for p in paths if p.lstat().st_mode & 0o077
    ]
    assert wide == []
