"""The ACP agent registry: the snapshot the package ships, its checks, and launches.

Standard library and orjson only, so that ``oma-bridge registry list`` and
``oma-bridge agents add`` start as fast as the other client commands.  The
data (``data/``: the joined registry document, its two schemas, the
registry's Apache-2.0 licence, and ``snapshot.json`` naming the commit it
was taken at) is refreshed with ``scripts/acp_registry_snapshot.py``.
"""

from __future__ import annotations

from oma_bridge.acp_registry.launch import Launch, LaunchError, launch, this_platform
from oma_bridge.acp_registry.registry import (
    Entry,
    Refused,
    Registry,
    RegistryError,
    Snapshot,
    id_problem,
    load_registry,
    shipped_registry_path,
    snapshot,
    version_problem,
)

__all__ = [
    "Entry",
    "Launch",
    "LaunchError",
    "Refused",
    "Registry",
    "RegistryError",
    "Snapshot",
    "id_problem",
    "launch",
    "load_registry",
    "shipped_registry_path",
    "snapshot",
    "this_platform",
    "version_problem",
]
