"""The oma-bridge command line against a real daemon subprocess."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

CONFIG = """
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"

[agents.wordcount]
kind = "process"
command = "wc"
args = ["-w"]

[agents.nap]
kind = "process"
command = "sleep"
args = ["6"]
input = "none"

[agents.fails]
kind = "process"
command = "sh"
args = ["-c", "echo partial; exit 3"]
input = "none"

[agents.claude]
kind = "llm"
provider = "anthropic"
model = "claude-sonnet-4-5"
api_key_env = "OMA_TEST_UNSET_KEY"
"""

PNG = bytes.fromhex("89504e470d0a1a0a")


@pytest.fixture
def env() -> Iterator[dict[str, str]]:
    folder = Path(tempfile.mkdtemp(prefix="omab-cli-", dir="/tmp"))
    environment = {
        **os.environ,
        "XDG_RUNTIME_DIR": str(folder / "run"),
        "XDG_STATE_HOME": str(folder / "state"),
        "XDG_CONFIG_HOME": str(folder / "config"),
    }
    environment.pop("OMA_TEST_UNSET_KEY", None)  # the claude profile's key: never set here
    (folder / "run").mkdir(mode=0o700)
    yield environment
    shutil.rmtree(folder, ignore_errors=True)


def cli(
    env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oma_bridge.cli", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def daemon(env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    config = Path(env["XDG_CONFIG_HOME"]) / "test.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(CONFIG)
    process = subprocess.Popen(
        [sys.executable, "-m", "oma_bridge.cli", "serve", "--config", str(config)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    discovery = Path(env["XDG_RUNTIME_DIR"]) / "oma-bridge" / "bridge.json"
    deadline = time.monotonic() + 20
    while not discovery.exists():
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        assert time.monotonic() < deadline, "the daemon did not become ready"
        time.sleep(0.05)
    yield process
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0
    assert not discovery.exists()


def test_version() -> None:
    out = cli(dict(os.environ), "--version")
    assert out.returncode == 0 and out.stdout.startswith("oma-bridge ")


def test_no_daemon_is_said_clearly(env: dict[str, str]) -> None:
    out = cli(env, "agents")
    assert out.returncode == 3
    assert "no oma-bridge daemon is running" in out.stderr
    assert "oma-bridge serve" in out.stderr
    assert "Traceback" not in out.stderr


def test_agents_and_status_tables(env: dict[str, str], daemon: subprocess.Popen[str]) -> None:
    agents = cli(env, "agents")
    assert agents.returncode == 0
    assert agents.stdout.split("\n")[0].split() == ["NAME", "KIND", "MODEL", "DESCRIPTION"]
    assert "wordcount  process" in agents.stdout
    status = cli(env, "status")
    assert status.returncode == 0
    for title in ("AGENTS", "RUNS", "PROCESSES"):
        assert title in status.stdout


def test_status_wait_idle_waits_for_the_runs_in_flight(
    env: dict[str, str], daemon: subprocess.Popen[str]
) -> None:
    """``status --wait-idle S``: what a preStop hook runs (deploy/kubernetes/deployment.yaml)."""
    assert cli(env, "status", "--wait-idle", "5").returncode == 0  # idle: at once
    nap = subprocess.Popen(
        [sys.executable, "-m", "oma_bridge.cli", "run", "nap", "go"],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while "RUNS\n  (none)" in cli(env, "status").stdout:
            assert time.monotonic() < deadline, "the run did not start"
            time.sleep(0.05)
        busy = cli(env, "status", "--wait-idle", "0.1")
        assert busy.returncode == 1
        assert busy.stdout.rstrip().endswith("1 run(s) still in flight after 0.1 s")
        started = time.monotonic()
        idle = cli(env, "status", "--wait-idle", "20")
        assert idle.returncode == 0, idle.stdout
        assert time.monotonic() - started < 15
        assert nap.wait(timeout=10) == 0  # it ended by itself, not cancelled
    finally:
        nap.kill()
        nap.wait()


def test_run_prints_output(env: dict[str, str], daemon: subprocess.Popen[str]) -> None:
    out = cli(env, "run", "echo", "hello there")
    assert (out.returncode, out.stdout) == (0, "hello there\n")
    streamed = cli(env, "run", "echo", "--stream", "--system", "terse", "one two")
    assert (streamed.returncode, streamed.stdout) == (0, "(system: terse) one two\n")
    piped = cli(env, "run", "wordcount", "-", stdin="four words from stdin")
    assert piped.returncode == 0 and piped.stdout.strip() == "4"


def test_images_are_structured_input(
    env: dict[str, str], daemon: subprocess.Popen[str], tmp_path: Path
) -> None:
    image = tmp_path / "dot.png"
    image.write_bytes(PNG)
    seen = cli(env, "run", "echo", "what is this", "--image", str(image))
    assert (seen.returncode, seen.stdout) == (0, "what is this [image:image/png]\n")
    refused = cli(env, "run", "wordcount", "what is this", "--image", str(image))
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "oma-bridge: InvalidMessageError: The process external backend accepts string prompts "
        "only; structured messages or content blocks cannot be forwarded without loss."
    ]
    not_image = tmp_path / "notes.txt"
    not_image.write_text("x")
    assert cli(env, "run", "echo", "x", "--image", str(not_image)).returncode == 2


def test_unknown_profile_is_bad_input(env: dict[str, str], daemon: subprocess.Popen[str]) -> None:
    """PROTOCOL §18.3: the profiles there are, and the nearest name when one is near."""
    profiles = "(the profiles: claude, echo, fails, nap, wordcount)"
    out = cli(env, "run", "nope", "x")
    assert out.returncode == 2
    assert out.stderr.strip() == f'oma-bridge: Not found: no agent profile named "nope" {profiles}'
    typo = cli(env, "run", "ecoh", "hi")
    assert typo.returncode == 2
    assert typo.stderr.splitlines() == [
        f'oma-bridge: Not found: no agent profile named "ecoh"; did you mean "echo"? {profiles}'
    ]


KEY_NOT_SET = "OMA_TEST_UNSET_KEY is not set in the daemon's environment"


def test_a_profile_without_its_key_says_where_to_set_it(
    env: dict[str, str], daemon: subprocess.Popen[str]
) -> None:
    """PROTOCOL §18.3: `agents` warns; the run fails with the sentence, once, on stderr."""
    agents = cli(env, "agents")
    assert agents.returncode == 0
    assert agents.stderr.splitlines() == [f"oma-bridge: claude: not ready: {KEY_NOT_SET}"]
    run = cli(env, "run", "claude", "hello")
    assert run.returncode == 1
    assert run.stdout == "", run.stderr  # the error is not output
    assert run.stderr.splitlines() == [
        f'oma-bridge: run error: Agent "claude": no API key: the variable {KEY_NOT_SET} '
        "(api_key_env); set it where the daemon starts (under systemd: "
        "`systemctl --user edit oma-bridge`, Environment=) and restart the daemon"
    ]
    # The other profiles are ready, and say nothing.
    assert "echo: not ready" not in agents.stderr


def test_the_daemon_warns_at_start_of_a_profile_without_its_key(env: dict[str, str]) -> None:
    config = Path(env["XDG_CONFIG_HOME"]) / "keys.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(CONFIG)
    process = subprocess.Popen(
        [sys.executable, "-m", "oma_bridge.cli", "serve", "--config", str(config)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    discovery = Path(env["XDG_RUNTIME_DIR"]) / "oma-bridge" / "bridge.json"
    deadline = time.monotonic() + 20
    while not discovery.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    log, _ = process.communicate(timeout=20)
    warned = [line for line in log.splitlines() if "is not ready" in line]
    assert len(warned) == 1, log  # one line per profile that cannot run: claude alone
    assert warned[0].endswith(
        f'agent profile "claude" is not ready: {KEY_NOT_SET}; its runs fail until it is set '
        "and the daemon restarted"
    ), warned


def test_a_config_value_of_the_wrong_type_is_said_in_toml_words(
    env: dict[str, str], tmp_path: Path
) -> None:
    """``args = "-w"``: not ``Input should be a valid tuple`` (PROTOCOL §18.3)."""
    for value, problem in [
        ('"-w"', "expected a list of strings, got a string"),
        ("[1]", "expected a string, got an integer"),
    ]:
        config = tmp_path / "typed.toml"
        config.write_text(f'[agents.wc]\nkind = "process"\ncommand = "wc"\nargs = {value}\n')
        out = cli(env, "serve", "--config", str(config))
        assert out.returncode == 2
        key = "agents.wc.args" if value == '"-w"' else "agents.wc.args[0]"
        assert out.stderr.splitlines()[-1] == f"oma-bridge: {config}: {key}: {problem}"


def test_exit_statuses_of_the_contract(env: dict[str, str], daemon: subprocess.Popen[str]) -> None:
    """PROTOCOL §18.3: 0 success, 1 a failed run, 2 bad input or usage (3 and 4: above, and
    tests/cli/test_remote.py)."""
    assert cli(env, "run", "echo", "hi").returncode == 0
    failed = cli(env, "run", "fails", "go")
    assert failed.returncode == 1
    # The failure is said once, on stderr; its message is not output (stdout).
    assert failed.stdout == "", failed.stderr
    [line] = failed.stderr.splitlines()
    assert line.startswith("oma-bridge: run error: ") and "3" in line, line
    # No prompt is a usage error, not a run of nothing (stdin is not read without "-").
    usage = cli(env, "run", "echo", stdin="not read")
    assert usage.returncode == 2
    assert usage.stdout == ""
    assert usage.stderr.splitlines()[0].startswith("usage: oma-bridge run ")
    assert usage.stderr.splitlines()[-1] == (
        'oma-bridge run: error: no prompt: give it after the agent, or "-" to read it from stdin'
    )
    assert cli(env, "run", "nope", "x").returncode == 2  # an unknown profile
    assert cli(env, "status", "--wait-idle", "x").returncode == 2  # argparse's own


@pytest.mark.parametrize(
    "command",
    [["status"], ["agents"], ["run", "echo", "hi"], ["run", "echo", "--stream", "hi"]],
)
def test_a_closed_stdout_ends_quietly(
    env: dict[str, str], daemon: subprocess.Popen[str], command: list[str]
) -> None:
    """``oma-bridge status | head``: the reader gone before the output, no traceback."""
    process = subprocess.Popen(
        [sys.executable, "-m", "oma_bridge.cli", *command],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # as `head` does once it has read enough
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) == 141, stderr  # 128 + SIGPIPE, as a shell says
    assert stderr == ""  # not a BrokenPipeError traceback, nor "Exception ignored"


def test_bad_config_stops_serve_with_one_line(env: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[agents.x]\nkind = "process"\n')
    out = cli(env, "serve", "--config", str(config))
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.startswith("oma-bridge:")]
    assert len(lines) == 1
    assert str(config) in lines[0] and "agents.x.command" in lines[0]
