"""``python -m oma_bridge.cli``: the ``oma-bridge`` command."""

from oma_bridge.cli import console_main

raise SystemExit(console_main())
