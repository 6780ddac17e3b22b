"""Fixtures of the daemon tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A private folder with a short path: unix socket paths are limited to ~100 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="omb-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def runtime_dir(short_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$XDG_RUNTIME_DIR`` pointed at a private folder; returns the daemon's folder in it."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_dir))
    return short_dir / "oma-bridge"
