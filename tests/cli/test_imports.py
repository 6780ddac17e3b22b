"""The client path starts light: what a fresh interpreter loads for it (bench/bench_cli.py).

The import-linter contract ``client-path-light`` holds the static arrows;
this checks what is actually loaded, lazy attributes of the packages included.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("pydantic", "httpx", "oma_bridge.agent", "oma_bridge.server", "oma_bridge.orchestration")


def loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return set(out.stdout.split())


@pytest.mark.parametrize(
    "code",
    [
        "import oma_bridge.cli",
        "import oma_bridge.shim",
        "from oma_bridge.client import connect",
        "from oma_bridge.results import AgentRunResult",
    ],
)
def test_the_client_path_loads_nothing_heavy(code: str) -> None:
    loaded = loaded_after(code)
    assert not {m for m in loaded if m.split(".")[0] in HEAVY or m.startswith(HEAVY)}
    assert "oma_bridge.backends" not in loaded
    assert "oma_bridge.messages" not in loaded


def test_the_command_line_and_the_shim_load_no_anyio() -> None:
    loaded = loaded_after("import oma_bridge.cli, oma_bridge.shim")
    assert "anyio" not in loaded
    assert "oma_bridge.rpc" not in loaded
