"""Tracing off costs nothing: without the OTEL variables, or without the otel extra, a run
imports nothing of ``opentelemetry`` (PROTOCOL §20.1).  Runs with or without the extra."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson

#: An llm run (the echo provider) and a process run, then what was imported.
SCRIPT = textwrap.dedent(
    """
    import sys, anyio, orjson
    {prelude}
    from oma_bridge import Agent
    from oma_bridge.agent import AgentConfig
    from oma_bridge.backends.process import ProcessConfig

    async def main():
        echo = Agent(AgentConfig(name="e", provider="echo", model="echo-1"))
        cat = Agent(AgentConfig(name="c", backend=ProcessConfig(command="cat")))
        async with echo, cat:
            first = await echo.run("hello there")
            second = await cat.run("piped")
        return [first.output, second.output]

    outputs = anyio.run(main)
    loaded = sorted(name for name in sys.modules if name.split(".")[0] == "opentelemetry")
    print(orjson.dumps({{"outputs": outputs, "loaded": loaded}}).decode())
    """
)

#: Makes ``opentelemetry`` unimportable, as on an install without the extra.
NO_EXTRA = textwrap.dedent(
    """
    import importlib.abc
    class NoOtel(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "opentelemetry":
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None
    sys.meta_path.insert(0, NoOtel())
    """
)


def run(prelude: str, **variables: str) -> tuple[dict[str, object], str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env.update(variables)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(prelude=prelude)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return orjson.loads(done.stdout.splitlines()[-1]), done.stderr


def test_without_the_variables_nothing_is_imported() -> None:
    report, _ = run("")
    assert report == {"outputs": ["hello there", "piped"], "loaded": []}


def test_without_the_extra_the_variables_are_noted_once_and_runs_go_on() -> None:
    report, stderr = run(NO_EXTRA, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    assert report == {"outputs": ["hello there", "piped"], "loaded": []}
    assert stderr.count("the otel extra is not installed") == 1


def test_otel_sdk_disabled_wins_over_the_endpoint() -> None:
    report, _ = run("", OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", OTEL_SDK_DISABLED="true")
    assert report["loaded"] == []


#: ``[server] otel = true`` where the extra is missing: the daemon does not start, and says why.
REFUSED = """
import sys
from pathlib import Path
import anyio
{prelude}
from oma_bridge.server.config import parse_config
from oma_bridge.server.daemon import run_daemon
from oma_bridge.server.listeners import StartupError

folder = Path(sys.argv[1])
text = f'[server]\\nsocket = "{{folder}}/s.sock"\\notel = true\\n'
config = parse_config(text, source="t.toml", base_dir=folder)
try:
    anyio.run(lambda: run_daemon(config, state_dir=folder / "state"))
except StartupError as error:
    print(error)
"""


def test_otel_true_without_the_extra_refuses_to_start(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", REFUSED.format(prelude=NO_EXTRA), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "[server] otel = true: OpenTelemetry tracing needs the otel extra: pip install "
        "'oma-bridge[otel]' (opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http)"
    )
