"""``python -m oma_bridge.cli``: the ``oma-bridge`` command."""

from oma_bridge.cli import main

raise SystemExit(main())
