"""``[server] event_loop`` and ``oma-bridge acp --event-loop`` (issue 30): uvloop or asyncio.

A real ``oma-bridge serve`` on each loop runs a process agent (a spawn and its
pipes, ``anyio.open_process``) and says in its log and in ``daemon/status``
which loop it runs; ``uvloop`` asked for where it is not installed is one line
naming the fix, for the daemon and for the shim.
"""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import orjson
import pytest

from oma_bridge.event_loop import resolve_event_loop
from oma_bridge.server.config import parse_config
from tests.cli.test_cli import cli, env

__all__ = ["env"]  # the fixture, shared with test_cli

HAVE_UVLOOP = importlib.util.find_spec("uvloop") is not None

CONFIG = """
[server]
event_loop = "{loop}"

[agents.cat]
kind = "process"
command = "cat"
"""

#: The client asks the daemon the environment names (its unix socket) for its loop.
STATUS = textwrap.dedent(
    """
    import anyio
    from oma_bridge.client import connect

    async def main():
        async with connect() as client:
            print((await client.status())["eventLoop"])

    anyio.run(main)
    """
)

#: Makes ``uvloop`` unimportable, as on an install without the ``fast`` extra.
NO_UVLOOP = textwrap.dedent(
    """
    import importlib.abc, sys
    class NoUvloop(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "uvloop":
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None
    sys.meta_path.insert(0, NoUvloop())
    from oma_bridge.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)

LOOPS = [
    "asyncio",
    pytest.param(
        "uvloop",
        marks=pytest.mark.skipif(
            not HAVE_UVLOOP, reason="uvloop is not installed (the fast extra)"
        ),
    ),
]


@pytest.mark.parametrize("loop", LOOPS)
def test_serve_runs_process_agents_on_the_loop_asked_for(env: dict[str, str], loop: str) -> None:
    config = Path(env["XDG_CONFIG_HOME"]) / "loop.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(CONFIG.format(loop=loop))
    daemon = subprocess.Popen(
        [sys.executable, "-m", "oma_bridge.cli", "serve", "--config", str(config)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        discovery = Path(env["XDG_RUNTIME_DIR"]) / "oma-bridge" / "bridge.json"
        deadline = time.monotonic() + 30
        while not discovery.exists():
            assert daemon.poll() is None, daemon.stdout.read() if daemon.stdout else ""
            assert time.monotonic() < deadline, "the daemon did not become ready"
            time.sleep(0.05)
        for text in ("first", "second"):  # two spawns, each read to its end and reaped
            out = cli(env, "run", "cat", text)
            assert (out.returncode, out.stdout.strip()) == (0, text), out.stderr
        status = subprocess.run(
            [sys.executable, "-c", STATUS], env=env, capture_output=True, text=True, timeout=60
        )
        assert status.stdout.strip() == loop, status.stderr
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=20) == 0
        log = daemon.stdout.read() if daemon.stdout else ""
    assert f"event loop: {loop}" in log


def _without_uvloop(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", NO_UVLOOP, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_serve_refuses_uvloop_where_it_is_missing(env: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "uvloop.toml"
    config.write_text(CONFIG.format(loop="uvloop"))
    out = _without_uvloop(env, "serve", "--config", str(config))
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        f'oma-bridge: {config}: server.event_loop: event_loop = "uvloop" but uvloop is not '
        'installed: pip install \'oma-bridge[fast]\', or choose "auto" or "asyncio"'
    ]


def test_serve_auto_without_uvloop_runs_asyncio(env: dict[str, str], tmp_path: Path) -> None:
    # Asked in the process that has no uvloop: "auto" falls back, it does not refuse.
    script = NO_UVLOOP.replace(
        "from oma_bridge.cli import main\nsys.exit(main(sys.argv[1:]))",
        "from oma_bridge.event_loop import resolve_event_loop\nprint(resolve_event_loop('auto'))",
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.strip() == "asyncio", done.stderr
    assert resolve_event_loop("auto") == ("uvloop" if HAVE_UVLOOP else "asyncio")
    assert resolve_event_loop("asyncio") == "asyncio"


def test_the_default_is_asyncio() -> None:
    # Where uvloop is installed too: the default is a choice, not a detection.
    assert parse_config("", source="t.toml", base_dir=Path.cwd()).server.event_loop == "asyncio"


def test_a_bad_event_loop_value_names_the_key(env: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(CONFIG.format(loop="trio"))
    out = cli(env, "serve", "--config", str(config))
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.startswith("oma-bridge:")]
    assert len(lines) == 1 and "server.event_loop" in lines[0], out.stderr


def test_shim_refuses_uvloop_where_it_is_missing(env: dict[str, str]) -> None:
    out = _without_uvloop(env, "acp", "cat", "--no-autostart", "--event-loop", "uvloop")
    assert out.returncode == 2, out.stderr
    assert (
        out.stderr.strip()
        .splitlines()[-1]
        .endswith(
            '--event-loop: event_loop = "uvloop" but uvloop is not installed: '
            'pip install \'oma-bridge[fast]\', or choose "auto" or "asyncio"'
        )
    )
    assert out.stdout == ""


@pytest.mark.parametrize("loop", LOOPS)
def test_shim_on_each_loop_answers_initialize_when_no_daemon_runs(
    env: dict[str, str], loop: str
) -> None:
    # Its stdin thread hands lines to the loop (call_soon_threadsafe) on either loop.
    initialize = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    out = cli(env, "acp", "cat", "--no-autostart", "--event-loop", loop, stdin=initialize.decode())
    assert out.returncode == 3, out.stderr
    answer = orjson.loads(out.stdout)
    assert answer["id"] == 1 and "no daemon is running" in answer["error"]["message"]
    assert "Traceback" not in out.stderr
