"""Helpers for the ACP backend tests: real agents over real stdio."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import psutil

from oma_bridge.backends import BackendOutcome, PermissionHandler, RunContext
from oma_bridge.backends.acp import AcpBackend, AcpConfig
from oma_bridge.messages import text_message
from oma_bridge.results import StreamEvent

AGENTS = Path(__file__).resolve().parent.parent / "agents"
SCENARIO = str(AGENTS / "acp_scenario_agent.py")


def scenario_config(tmp_path: Path, **overrides: Any) -> AcpConfig:
    env = {"PYTHONUNBUFFERED": "1", **overrides.pop("env", {})}
    fields: dict[str, Any] = {
        "command": sys.executable,
        "args": (SCENARIO,),
        "cwd": tmp_path,
        "env": env,
        "cancel_grace_s": 3.0,
        "stop_grace_s": 1.0,
    }
    fields.update(overrides)
    return AcpConfig(**fields)


def fault_config(tmp_path: Path, script: str, *args: str, **overrides: Any) -> AcpConfig:
    return scenario_config(tmp_path, args=(str(AGENTS / script), *args), **overrides)


class Recorder:
    def __init__(self) -> None:
        self.events: list[StreamEvent] = []

    async def __call__(self, event: StreamEvent) -> None:
        self.events.append(event)

    def of(self, kind: str) -> list[Any]:
        return [e.data for e in self.events if e.type == kind]


def context(
    text: str,
    recorder: Recorder,
    *,
    system_prompt: str | None = None,
    permission_handler: PermissionHandler | None = None,
    run_id: str = "r1",
) -> RunContext:
    return RunContext(
        run_id=run_id,
        agent_name="coder",
        messages=[text_message(text)],
        system_prompt=system_prompt,
        emit=recorder,
        permission_handler=permission_handler,
    )


async def run_text(
    backend: AcpBackend, text: str, **kwargs: Any
) -> tuple[BackendOutcome, Recorder]:
    recorder = Recorder()
    outcome = await backend.run(context(text, recorder, **kwargs))
    return outcome, recorder


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
