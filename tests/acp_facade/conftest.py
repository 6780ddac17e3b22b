"""Fixtures of the ACP facade tests: a real daemon per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .harness import Facade, facade_daemon


@pytest.fixture
def facade(tmp_path: Path) -> Iterator[Facade]:
    """``oma-bridge serve`` with the profiles of :data:`harness.BASE_AGENTS`."""
    with facade_daemon(tmp_path) as daemon:
        yield daemon
