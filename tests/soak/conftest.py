"""Fixtures of the soak tests: the lifecycle suite's private short folder, reused."""

from __future__ import annotations

from lifecycle.conftest import folder

__all__ = ["folder"]
