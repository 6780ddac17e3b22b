"""The ``oma-bridge`` command line."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ._version import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="oma-bridge",
        description="Run LLM, process and ACP agents side by side behind one websocket daemon.",
    )
    parser.add_argument("--version", action="version", version=f"oma-bridge {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    parser.parse_args(argv)
    parser.print_help()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
