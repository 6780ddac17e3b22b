"""Fixtures of the ACP facade tests: a real daemon per test, or a machine without one."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from .harness import Facade, client_env, facade_daemon, private_runtime_dir


@pytest.fixture
def facade(tmp_path: Path) -> Iterator[Facade]:
    """``oma-bridge serve`` with the profiles of :data:`harness.BASE_AGENTS`."""
    with facade_daemon(tmp_path) as daemon:
        yield daemon


@pytest.fixture
def no_daemon(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of a machine where no daemon runs yet; whatever starts is stopped."""
    runtime = private_runtime_dir()
    env = client_env(tmp_path / "no-daemon", runtime)
    try:
        yield env
    finally:
        discovery = runtime / "oma-bridge" / "bridge.json"
        with contextlib.suppress(OSError, ValueError, KeyError, psutil.Error):
            daemon = psutil.Process(int(json.loads(discovery.read_text())["pid"]))
            if "serve" in daemon.cmdline():
                for process in [daemon, *daemon.children(recursive=True)]:
                    process.kill()
        shutil.rmtree(runtime, ignore_errors=True)
