"""Write the wire protocol's JSON Schema to ``docs/schema/protocol.schema.json``.

Run after changing a wire model: ``.venv/bin/python scripts/gen_schema.py``.
``--check`` exits 1 (writing nothing) when the checked-in file is not current.
The output is stable: keys sorted, two-space indent, one trailing newline.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from oma_bridge.wire.schema import protocol_schema

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "docs" / "schema" / "protocol.schema.json"


def render() -> str:
    """The document as it is checked in."""
    return json.dumps(protocol_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="only check that the file is current")
    args = parser.parse_args(argv)
    text = render()
    current = SCHEMA_PATH.read_text(encoding="utf-8") if SCHEMA_PATH.exists() else None
    if args.check:
        if current != text:
            print(f"{SCHEMA_PATH} is out of date: run scripts/gen_schema.py", file=sys.stderr)
            return 1
        return 0
    if current != text:
        SCHEMA_PATH.parent.mkdir(parents=True, exist_ok=True)
        SCHEMA_PATH.write_text(text, encoding="utf-8")
        print(f"wrote {SCHEMA_PATH}")
    else:
        print(f"{SCHEMA_PATH} is current")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
