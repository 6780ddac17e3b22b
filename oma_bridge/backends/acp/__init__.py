"""The ACP backend: oma-bridge as an Agent Client Protocol client (see ``docs/acp.md``)."""

from __future__ import annotations

from oma_bridge.backends.acp.backend import AcpBackend
from oma_bridge.backends.acp.config import AcpConfig

__all__ = ["AcpBackend", "AcpConfig"]
