"""A user's daemon as ``make serve`` starts it, in folders of the test's (built-in config)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Variables of the test's own session that would send the CLI elsewhere.
_HIDDEN = ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER", "OMA_BRIDGE_URL")


def user_env(root: Path, **extra: str) -> dict[str, str]:
    """The environment with the XDG folders under ``root`` (no config.toml: the built-in one)."""
    return {key: value for key, value in os.environ.items() if key not in _HIDDEN} | {
        "XDG_RUNTIME_DIR": str(root / "run"),
        "XDG_CONFIG_HOME": str(root / "config"),
        "XDG_STATE_HOME": str(root / "state"),
        "OMA_BRIDGE_SYSTEM_ROOT": str(root),
        **extra,
    }


@contextlib.contextmanager
def serving(root: Path, *args: str) -> Iterator[dict[str, Any]]:
    """``oma-bridge serve ARGS`` until its discovery file is written; SIGTERM at the end."""
    log = (root / "serve.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "oma_bridge.cli", "serve", *args],
        env=user_env(root),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    discovery = root / "run" / "oma-bridge" / "bridge.json"
    try:
        deadline = time.monotonic() + 20
        found: dict[str, Any] = {}
        while not found:
            assert process.poll() is None, (root / "serve.log").read_text()
            assert time.monotonic() < deadline, "no discovery file within 20 s"
            with contextlib.suppress(OSError, ValueError):
                found = json.loads(discovery.read_text())
            time.sleep(0.05)
        yield found
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        log.close()
