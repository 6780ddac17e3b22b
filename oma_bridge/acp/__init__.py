"""The ACP backend: oma-bridge as an Agent Client Protocol client (see ``docs/acp.md``)."""

from __future__ import annotations

from .backend import AcpBackend
from .config import AcpConfig

__all__ = ["AcpBackend", "AcpConfig"]
