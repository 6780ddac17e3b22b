"""``oma-bridge serve`` for bench_metrics.py: with the daemon's recorder, or one recording nothing.

Run: ``python bench/_metrics_daemon.py CONFIG on|off``.  ``on`` is what
``oma-bridge serve`` runs (a :class:`~oma_bridge.server.metrics.Metrics`);
``off`` hands the daemon :data:`~oma_bridge.server.metrics.NO_METRICS`, the
same daemon with every recording call a no-op (and no ``/metrics``).
"""

from __future__ import annotations

import sys

import anyio

from oma_bridge.server.config import load_config
from oma_bridge.server.daemon import run_daemon, tune_gc
from oma_bridge.server.metrics import NO_METRICS, Metrics


async def main(path: str, mode: str) -> None:
    metrics = Metrics() if mode == "on" else NO_METRICS
    await run_daemon(load_config(path), handle_signals=True, metrics=metrics)


if __name__ == "__main__":
    tune_gc()
    anyio.run(main, sys.argv[1], sys.argv[2])
