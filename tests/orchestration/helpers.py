"""Helpers of the team tests: real process and ACP members, event-order checks."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from oma_bridge.agent import AgentConfig
from oma_bridge.backends.acp import AcpConfig
from oma_bridge.backends.process import ProcessConfig

AGENTS = Path(__file__).resolve().parent.parent / "agents"


def shell(name: str, script: str, cwd: Path, **fields: Any) -> AgentConfig:
    """A process member running ``sh -c script`` in ``cwd`` (stdin carries the prompt)."""
    backend = ProcessConfig(command="sh", args=("-c", script), cwd=str(cwd), stop_grace_s=1.0)
    return AgentConfig(name=name, backend=backend, **fields)


def acp_member(name: str, log: Path, **fields: Any) -> AgentConfig:
    """An ACP member (tests/agents/acp_team_agent.py) that logs to ``log``."""
    backend = AcpConfig(
        command=sys.executable,
        args=(str(AGENTS / "acp_team_agent.py"),),
        cwd=log.parent,
        env={"ACP_TEAM_LOG": str(log), "PYTHONUNBUFFERED": "1"},
        permission="reject",
        cancel_grace_s=3.0,
        stop_grace_s=1.0,
    )
    return AgentConfig(name=name, backend=backend, **fields)


def log_lines(log: Path, word: str) -> list[str]:
    if not log.exists():
        return []
    return [line.split(" ", 1)[1] for line in log.read_text().splitlines() if line.startswith(word)]


class Events:
    """Every progress event, with checks of their order."""

    def __init__(self) -> None:
        self.all: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any]) -> None:
        self.all.append(event)

    def types(self, task: str | None = None) -> list[str]:
        return [e["type"] for e in self.all if task is None or e.get("task") == task]

    def index(self, kind: str, task: str) -> int:
        (found,) = [
            i for i, e in enumerate(self.all) if e["type"] == kind and e.get("task") == task
        ]
        return found

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.all if e["type"] == kind]

    def check_task_order(self, task: str, end: str = "task_complete") -> None:
        """task_start, then the agent's runs (each start before its end), then ``end``."""
        kinds = self.types(task)
        assert kinds[0] == "task_start", kinds
        assert kinds[-1] == end, kinds
        runs = [k for k in kinds[1:-1] if k in ("agent_start", "agent_complete")]
        assert runs and runs == ["agent_start", "agent_complete"] * (len(runs) // 2), kinds

    def check_after(self, dependency: str, task: str) -> None:
        """A dependent starts only after its dependency ended."""
        assert self.index("task_complete", dependency) < self.index("task_start", task)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(pids: list[int], within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if all(gone(pid) for pid in pids):
            return True
        time.sleep(0.02)
    return all(gone(pid) for pid in pids)


def live_children() -> list[psutil.Process]:
    """This test process's descendants that still run, but the supervisor's watchdog.

    The crash watchdog (oma_bridge/supervision/watchdog.py) lives as long
    as this process, by design; zombies are dead.
    """
    alive = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            if not any(part.endswith("supervision/watchdog.py") for part in child.cmdline()):
                alive.append(child)
    return alive


def kill_all(pids: list[int]) -> None:
    """Clean-up: whatever the code under test failed to end."""
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
