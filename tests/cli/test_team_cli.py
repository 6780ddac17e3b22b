"""``oma-bridge team FILE.toml`` against a real ``oma-bridge serve`` subprocess."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES = ROOT / "docs" / "examples"

CONFIG = """
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"

[agents.cat]
kind = "process"
command = "cat"

[agents.failing]
kind = "process"
command = "sh"
args = ["-c", "cat > /dev/null; echo broken >&2; exit 1"]
"""

#: Every line the command writes to stderr for a progress event starts with its type.
EVENTS = (
    "task_start",
    "task_complete",
    "task_failed",
    "task_skipped",
    "task_retry",
    "agent_start",
    "agent_complete",
    "budget_exceeded",
)


@pytest.fixture
def env() -> Iterator[dict[str, str]]:
    folder = Path(tempfile.mkdtemp(prefix="omab-team-", dir="/tmp"))
    environment = {
        **os.environ,
        "XDG_RUNTIME_DIR": str(folder / "run"),
        "XDG_STATE_HOME": str(folder / "state"),
        "XDG_CONFIG_HOME": str(folder / "config"),
    }
    (folder / "run").mkdir(mode=0o700)
    (folder / "config").mkdir()
    yield environment
    shutil.rmtree(folder, ignore_errors=True)


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oma_bridge.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


@contextlib.contextmanager
def serving(env: dict[str, str], config: str | None) -> Iterator[subprocess.Popen[str]]:
    """``oma-bridge serve`` (the built-in profiles when ``config`` is None) until the block ends."""
    args = [sys.executable, "-m", "oma_bridge.cli", "serve"]
    if config is not None:
        path = Path(env["XDG_CONFIG_HOME"]) / "test.toml"
        path.write_text(config)
        args += ["--config", str(path)]
    process = subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    discovery = Path(env["XDG_RUNTIME_DIR"]) / "oma-bridge" / "bridge.json"
    children: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 20
        while not discovery.exists():
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            assert time.monotonic() < deadline, "the daemon did not become ready"
            time.sleep(0.05)
        yield process
        children = psutil.Process(process.pid).children(recursive=True)
        # Every team run closed the agents it made: only the crash watchdog
        # (oma_bridge/supervision/watchdog.py, as long-lived as the daemon) is left.
        agents = [child for child in children if not _is_watchdog(child)]
        assert psutil.wait_procs(agents, timeout=5)[1] == []
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            assert process.wait(timeout=15) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=5)
    assert psutil.wait_procs(children, timeout=5)[1] == []  # the watchdog ended with it


def _is_watchdog(process: psutil.Process) -> bool:
    try:
        return any(part.endswith("supervision/watchdog.py") for part in process.cmdline())
    except psutil.Error:
        return False


@pytest.fixture
def daemon(env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    with serving(env, CONFIG) as process:
        yield process


def progress_lines(stderr: str) -> list[str]:
    lines = stderr.splitlines()
    assert all(line.split(" ", 1)[0] in EVENTS for line in lines if line), stderr
    return lines


def test_the_docs_example_runs_on_the_built_in_profiles(env: dict[str, str]) -> None:
    with serving(env, None):
        out = cli(env, "team", "docs/examples/team.toml")
        coordinated = cli(env, "team", str(EXAMPLES / "team-coordinated.toml"))
    assert out.returncode == 0, out.stderr
    # The Report's prompt (echo answers with it): both branches' outputs, laid out.
    assert out.stdout.startswith(
        "# Task: Report\n\nReport the word count and the review.\n\n"
        "## Context from prerequisite tasks\n\n### Count (by wordcount)\n"
    )
    assert "### Review (by demo)\nYou said: # Task: Review" in out.stdout
    lines = progress_lines(out.stderr)
    assert lines[0] == "task_start     Outline -> echo"
    assert lines.count("task_complete  Outline") == 1
    for line in ("task_start     Count -> wordcount", "task_start     Review -> demo"):
        assert line in lines
    assert "agent_complete demo [Review] ok" in lines
    assert lines[-1] == "task_complete  Report"
    assert len([line for line in lines if line.startswith("task_complete")]) == 4

    # The echo coordinator cannot plan: a clear failure, exit 1.
    assert coordinated.returncode == 1
    reason = "Coordinator plan failed validation after repair: The response contains no valid JSON."
    assert coordinated.stdout == reason + "\n"
    *events, summary = coordinated.stderr.splitlines()
    assert summary == f"oma-bridge: team run failed: {reason}"
    assert progress_lines("\n".join(events))[:2] == [
        "agent_start    echo (decomposition)",
        "agent_complete echo (decomposition) ok",
    ]


def test_a_failed_run_exits_1_and_says_what_failed(
    env: dict[str, str], daemon: subprocess.Popen[str], tmp_path: Path
) -> None:
    file = tmp_path / "fail.toml"
    file.write_text(
        """
max_concurrency = 1

[[tasks]]
title = "Break"
description = "x"
assignee = "failing"

[[tasks]]
title = "After"
description = "y"
assignee = "cat"
depends_on = ["Break"]

[[tasks]]
title = "Other"
description = "z"
assignee = "echo"
"""
    )
    out = cli(env, "team", str(file))
    assert out.returncode == 1
    *events, summary = out.stderr.splitlines()
    assert summary == "oma-bridge: team run failed: 1 failed, 1 skipped"
    lines = progress_lines("\n".join(events))
    assert (
        'task_failed    Break: failed: Process backend "failing" exited with code 1: broken'
        in lines
    )
    assert 'task_skipped   After: Skipped: dependency "Break" failed.' in lines
    assert "task_complete  Other" in lines
    assert out.stdout.startswith("# Task: Other\n\nz\n\n## Failed Tasks\n### Break (FAILED)\n")


def test_graph_errors_from_the_daemon_name_the_file_and_the_task(
    env: dict[str, str], daemon: subprocess.Popen[str], tmp_path: Path
) -> None:
    file = tmp_path / "graph.toml"
    file.write_text(
        '[[tasks]]\ntitle = "A"\ndescription = "x"\nassignee = "cat"\ndepends_on = ["B"]\n'
        '[[tasks]]\ntitle = "B"\ndescription = "y"\nassignee = "cat"\ndepends_on = ["A"]\n'
        '[[tasks]]\ntitle = "C"\ndescription = "z"\nassignee = "ghost"\n'
    )
    out = cli(env, "team", str(file))
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.splitlines() == [
        f'oma-bridge: {file}: Task "C" is assigned to unknown agent "ghost" '
        "(team: cat, echo, failing).",
        f'oma-bridge: {file}: Cyclic dependency detected: "A" -> "B" -> "A".',
    ]
    team = tmp_path / "team.toml"
    team.write_text('coordinator = "cat"\nagents = ["echo"]\ngoal = "g"\n')
    not_llm = cli(env, "team", str(team))
    assert (not_llm.returncode, not_llm.stderr) == (
        2,
        f'oma-bridge: {team}: coordinator: the coordinator "cat" must be an llm profile, '
        "not process\n",
    )
    team.write_text('coordinator = "echo"\nagents = ["nobody"]\ngoal = "g"\n')
    unknown = cli(env, "team", str(team))
    assert (unknown.returncode, unknown.stderr) == (
        2,
        'oma-bridge: Not found: no agent profile named "nobody" '
        "(the profiles: cat, echo, failing)\n",
    )


TASK = '[[tasks]]\ntitle = "A"\ndescription = "x"\nassignee = "cat"\n'


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[[tasks]\n", "not valid TOML: "),
        (TASK + "colour = 1\n", "tasks[0].colour: unknown key"),
        (TASK.replace('"x"', '["x"]'), "tasks[0].description: must be a string"),
        (TASK.replace('description = "x"\n', ""), "tasks[0].description: required key is missing"),
        (TASK + 'depends_on = "B"\n', "tasks[0].depends_on: must be a list of strings"),
        (TASK + "max_retries = -1\n", "tasks[0].max_retries: must be an integer >= 0"),
        ("max_concurrency = 0\n" + TASK, "max_concurrency: must be an integer >= 1"),
        ("tasks = 1\n", "tasks: must be tables ([[tasks]])"),
        ('coordinator = "echo"\nagents = ["cat"]\n', "goal: required key is missing"),
        ('coordinator = "echo"\nagents = []\ngoal = "g"\n', "agents: must name at least one"),
        ('coordinator = 1\nagents = ["cat"]\ngoal = "g"\n', "coordinator: must be a string"),
        ('goal = "g"\n' + TASK, "goal: a file has [[tasks]] or a team, not both"),
        ("surprise = 1\n", "surprise: unknown key"),
        ("", "needs [[tasks]] tables, or coordinator, agents and goal"),
    ],
)
def test_a_bad_file_exits_2_naming_the_file_and_the_key(
    env: dict[str, str], tmp_path: Path, text: str, said: str
) -> None:
    """Checked before any connection: exit 2 even without a daemon, one line."""
    file = tmp_path / "bad.toml"
    file.write_text(text)
    out = cli(env, "team", str(file))
    assert out.returncode == 2
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"oma-bridge: {file}: {said}"), line
    assert out.stdout == ""


def test_no_daemon_exits_3(env: dict[str, str], tmp_path: Path) -> None:
    file = tmp_path / "ok.toml"
    file.write_text(TASK)
    out = cli(env, "team", str(file))
    assert out.returncode == 3
    assert "no oma-bridge daemon is running" in out.stderr
    assert "Traceback" not in out.stderr
