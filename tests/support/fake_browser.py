"""A stand-in for a web browser, for ``$BROWSER``: it records what it was asked to open."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

__all__ = ["fake_browser", "opened"]


def fake_browser(folder: Path) -> Path:
    """An executable that writes its arguments to ``folder/browser-argv.json``.

    ``$BROWSER`` names one executable (the URL becomes its argument), hence the
    shebang rather than ``python script``.
    """
    script = folder / "browser.py"
    record = folder / "browser-argv.json"
    script.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
    )
    script.chmod(0o700)
    return script


def opened(folder: Path) -> list[str]:
    """The arguments the fake browser of ``folder`` was started with."""
    return list(orjson.loads((folder / "browser-argv.json").read_bytes()))
