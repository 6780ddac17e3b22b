"""Fixtures of the lifecycle tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def folder() -> Iterator[Path]:
    """A private folder with a short path (unix socket paths are limited to ~100 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="oml-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
