"""Shared fixtures.  Tests run on asyncio through the anyio pytest plugin."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import npm_peers


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def acp_ts_sdk() -> Path:
    """A folder whose ``node_modules`` holds ``@agentclientprotocol/sdk`` 2.4.0 (else skip)."""
    return npm_peers.ts_sdk_dir()


@pytest.fixture(scope="session")
def acpx() -> list[str]:
    """The command (``[node, cli.js]``) of the pinned ``acpx`` CLI (else skip)."""
    return npm_peers.acpx_command()
