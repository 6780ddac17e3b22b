"""Take a snapshot of the ACP agent registry into ``oma_bridge/acp_registry/data/``.

The registry (https://github.com/agentclientprotocol/registry, Apache-2.0)
keeps one ``<id>/agent.json`` per agent; its CDN serves them joined into one
``registry.json`` (``registry.schema.json``: ``{"version", "agents",
"extensions"}``).  This script builds that document from a git checkout or
bare clone of the repository at one commit, with our own code and the
registry's rules as its README and ``FORMAT.md`` state them: every top-level
folder holding an ``agent.json`` (or ``extension.json``), in name order,
except the folders that are not entries (hidden ones, ``_not_yet_unsupported``,
``dist``); an entry with an ``icon.svg`` beside it gets the icon's CDN address.

It writes the document, the two schemas and the registry's licence as they
are, and ``snapshot.json`` naming the commit and its date (what ``oma-bridge
registry --version`` prints)::

    .venv/bin/python scripts/acp_registry_snapshot.py GIT_DIR [COMMIT]

Then the tests (``tests/acp_registry``) check every entry against the schema.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent.parent / "oma_bridge" / "acp_registry" / "data"
REPOSITORY = "https://github.com/agentclientprotocol/registry"
CDN = "https://cdn.agentclientprotocol.com/registry/v1/latest"
#: The version of the joined document's format (registry.schema.json's ``version``).
FORMAT_VERSION = "1.0.0"
COPIED = ("agent.schema.json", "registry.schema.json", "LICENSE")


def _git(git_dir: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(git_dir), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def _is_entry_folder(name: str) -> bool:
    return not name.startswith((".", "_")) and name != "dist"


def build(git_dir: Path, commit: str) -> dict[str, str]:
    """The files of the snapshot, by name, at ``commit``."""
    names = _git(git_dir, "ls-tree", "-r", "--name-only", commit).splitlines()
    files = set(names)
    agents: list[Any] = []
    extensions: list[Any] = []
    folders = sorted({name.split("/", 1)[0] for name in names if "/" in name})
    for folder in filter(_is_entry_folder, folders):
        for kind, into in (("agent.json", agents), ("extension.json", extensions)):
            if f"{folder}/{kind}" not in files:
                continue
            entry = json.loads(_git(git_dir, "show", f"{commit}:{folder}/{kind}"))
            if f"{folder}/icon.svg" in files and isinstance(entry, dict):
                entry["icon"] = f"{CDN}/{entry.get('id', folder)}.svg"
            into.append(entry)
    document = {"version": FORMAT_VERSION, "agents": agents, "extensions": extensions}
    full = _git(git_dir, "rev-parse", commit).strip()
    date = _git(git_dir, "show", "-s", "--format=%cI", full).strip()
    snapshot = {"repository": REPOSITORY, "commit": full, "date": date}
    out = {name: _git(git_dir, "show", f"{full}:{name}") for name in COPIED}
    out["registry.json"] = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    out["snapshot.json"] = json.dumps(snapshot, indent=2) + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("git_dir", type=Path, help="a clone (or bare clone) of the registry")
    parser.add_argument("commit", nargs="?", default="HEAD")
    args = parser.parse_args(argv)
    DATA.mkdir(parents=True, exist_ok=True)
    for name, text in build(args.git_dir, args.commit).items():
        (DATA / name).write_text(text, encoding="utf-8")
        print(f"wrote {DATA / name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
