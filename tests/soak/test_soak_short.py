"""The 2-minute soak of ``make test``: the same code as ``make soak`` (bench/soak.py), shorter.

Ten clients run the mix of all three kinds for two minutes, and one more
comes and goes (connect, open, stream, close, disconnect); the daemon's
RSS, fds, threads and children, sampled every 5 s, must show no growth
beyond noise (the verdict of bench/soak.py) and every run must succeed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.anyio

SOAK_SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "soak.py"


def load_soak() -> ModuleType:
    """bench/ is a folder of scripts, not a package: load soak.py by path."""
    spec = importlib.util.spec_from_file_location("oma_bridge_bench_soak", SOAK_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(300)
async def test_two_minutes_of_mixed_load_show_no_growth(tmp_path: Path) -> None:
    soak = load_soak()
    verdict = await soak.soak(2, 10, tmp_path, sample_every=5.0, chart=False, churn=1)
    assert verdict.ok, verdict.text()
    assert verdict.figures["runs_failed"] == 0
    assert verdict.figures["runs_ok"] > 500, verdict.text()
    assert (tmp_path / "soak.csv").read_text().startswith("t_s,phase,rss_mb")
