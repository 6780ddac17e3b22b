"""Helpers for the process tests: run a backend directly, watch pids die."""

from __future__ import annotations

import contextlib
import re
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from oma_bridge.backends import BackendOutcome, RunContext
from oma_bridge.backends.process import ProcessConfig
from oma_bridge.messages import LLMMessage
from oma_bridge.results import StreamEvent

AGENTS = Path(__file__).parent.parent / "agents"
PYTHON = sys.executable


def script(name: str, *args: str) -> dict[str, Any]:
    """The ``command``/``args`` of a ProcessConfig running ``tests/agents/<name>``."""
    return {"command": PYTHON, "args": (str(AGENTS / name), *args)}


def user(text: str) -> list[LLMMessage]:
    return [{"role": "user", "content": [{"type": "text", "text": text}]}]


class Recorder:
    """An ``emit`` that keeps every event."""

    def __init__(self) -> None:
        self.events: list[StreamEvent] = []

    async def __call__(self, event: StreamEvent) -> None:
        self.events.append(event)

    @property
    def text(self) -> str:
        return "".join(event.data for event in self.events if event.type == "text")


async def run_backend(
    config: ProcessConfig,
    text: str = "hello",
    *,
    system_prompt: str | None = None,
    emit: Recorder | None = None,
    name: str = "p",
) -> BackendOutcome:
    context = RunContext(
        run_id="run-1",
        agent_name=name,
        messages=user(text) if text else [],
        system_prompt=system_prompt,
        emit=emit or Recorder(),
    )
    return await config.create(agent_name=name).run(context)


def tree_pids(text: str) -> dict[str, int]:
    """The ``child <pid>`` / ``grandchild <pid>`` lines ``proc_tree.py`` printed."""
    return {role: int(pid) for role, pid in re.findall(r"\b(child|grandchild) (\d+)", text)}


def gone(pid: int) -> bool:
    """Dead, or a zombie (PID 1 in some containers never reaps orphans)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(pids: list[int], within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if all(gone(pid) for pid in pids):
            return True
        time.sleep(0.02)
    return all(gone(pid) for pid in pids)


def kill_all(pids: list[int]) -> None:
    """Test clean-up: whatever the code under test failed to end."""
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
