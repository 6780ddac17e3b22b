"""Fixtures of the isolation tests: a short private folder, and bubblewrap that works here."""

from __future__ import annotations

import anyio
import pytest
from lifecycle.conftest import folder

from oma_bridge.errors import SandboxUnavailableError
from oma_bridge.supervision.sandbox import Bubblewrap

__all__ = ["folder", "require_bwrap"]


@pytest.fixture(scope="session")
def require_bwrap() -> None:
    """Skip, saying why, where no sandbox can be applied (no binary, no user namespaces)."""

    async def probe() -> None:
        await Bubblewrap().check(network=False)

    try:
        anyio.run(probe)
    except SandboxUnavailableError as error:
        pytest.skip(f"no sandbox on this machine: {error}")
