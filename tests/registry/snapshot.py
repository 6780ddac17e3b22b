"""A registry snapshot of the tests' own: npx, uvx and binary entries, and hostile ones.

:func:`write_registry` writes the registry's joined document (the format of
the CDN's ``registry.json``) with the entries given; :func:`npx_entry` and
the others build one entry each in ``agent.schema.json``'s format.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from oma_bridge.acp_registry import this_platform

PLATFORM = this_platform() or "linux-x86_64"


def entry(entry_id: str, distribution: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "id": entry_id,
        "name": fields.pop("name", entry_id.title()),
        "version": fields.pop("version", "1.2.3"),
        "description": fields.pop("description", f"the {entry_id} test agent"),
        "distribution": distribution,
        **fields,
    }


def npx_entry(entry_id: str, package: str, *args: str, **fields: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"package": package, "args": list(args)}
    if "env" in fields:
        spec["env"] = fields.pop("env")
    return entry(entry_id, {"npx": spec}, **fields)


def uvx_entry(entry_id: str, package: str, *args: str, **fields: Any) -> dict[str, Any]:
    return entry(entry_id, {"uvx": {"package": package, "args": list(args)}}, **fields)


def binary_entry(
    entry_id: str, *, sha256: str | None = None, env: dict[str, str] | None = None, **fields: Any
) -> dict[str, Any]:
    target: dict[str, Any] = {
        "archive": f"https://example.invalid/{entry_id}-1.2.3.tar.gz",
        "cmd": f"./{entry_id}",
        "args": ["acp"],
    }
    if sha256 is not None:
        target["sha256"] = sha256
    if env is not None:
        target["env"] = env
    return entry(entry_id, {"binary": {PLATFORM: target}}, **fields)


def write_registry(path: Path, *entries: object) -> Path:
    document = {"version": "1.0.0", "agents": list(entries), "extensions": []}
    path.write_text(json.dumps(document, indent=2))
    return path


def demo_binary(path: Path) -> tuple[Path, str]:
    """An executable file standing for a downloaded agent: the demo ACP agent.

    It appends a line to ``$STARTED_FILE`` when it starts (so a test can
    tell a spawn from none).  Returns the path and its SHA-256.
    """
    path.write_text(
        f"#!{sys.executable}\n"
        "import os, runpy, sys\n"
        "with open(os.environ['STARTED_FILE'], 'a') as f:\n"
        "    f.write(' '.join(sys.argv[1:]) + '\\n')\n"
        "sys.argv[1:] = []\n"
        "runpy.run_module('oma_bridge.demo.acp_agent', run_name='__main__')\n"
    )
    path.chmod(0o700)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()
