import subprocess
import sys

import oma_bridge


def test_version_is_exposed_and_cli_prints_it() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "oma_bridge.cli", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == f"oma-bridge {oma_bridge.__version__}"
