"""``oma/runAgent``: a one-off run of a profile's agent through the library's orchestrator.

The agent is built from its profile plus the request's overrides
(:func:`.overrides.agent_config`, with the run's id as the ``runId``
supervisor label of its processes) and ends with the run; its input is
prepared (guarded, copied) before anything is queued, and the run is one run
of the daemon (:mod:`.runs`) as every other.  Its progress goes to the caller
as ``oma/progress``, as a team run's does (:mod:`.teams`).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from oma_bridge.agent import prepare
from oma_bridge.errors import InvalidMessageError
from oma_bridge.orchestration.evaluation import EvaluationConfig, JsonlFileStore, resolve_scorer
from oma_bridge.orchestration.orchestrator import OpenMultiAgent, ProgressCallback
from oma_bridge.results import AgentRunResult
from oma_bridge.server.agents.host import AgentHost, check_declared_hooks
from oma_bridge.server.agents.overrides import agent_config, check_forbidden
from oma_bridge.server.agents.registry import HookTarget
from oma_bridge.server.agents.remote import Remote
from oma_bridge.server.agents.runs import Runs
from oma_bridge.server.agents.status import RUN_ID_LABEL
from oma_bridge.server.config import ServerConfig
from oma_bridge.server.methods import MethodRegistry
from oma_bridge.server.sandboxing import require_sandbox
from oma_bridge.server.session import Session
from oma_bridge.wire.codes import invalid_message
from oma_bridge.wire.params import AgentOverrides, HookFlags, RunAgentParams, parse_params

__all__ = ["OneOffMethods", "OrchestratedMethods", "build_orchestrator", "progress_sender"]


class OrchestratedMethods:
    """Methods that run the library's orchestrator as runs of the daemon: what they take.

    The profiles (``host``), the run bookkeeping (``runs``), the orchestrator,
    and ``remote`` for the permission requests of the agents they run.
    """

    def __init__(
        self, host: AgentHost, runs: Runs, orchestrator: OpenMultiAgent, remote: Remote
    ) -> None:
        self.host = host
        self.runs = runs
        self.orchestrator = orchestrator
        self.remote = remote


class OneOffMethods(OrchestratedMethods):
    """``oma/runAgent`` on the daemon's profiles, runs and orchestrator."""

    def register(self, registry: MethodRegistry) -> None:
        registry.add("oma/runAgent", self.run_agent)

    async def run_agent(self, session: Session, params: Any) -> dict[str, Any]:
        check_forbidden(params, "config")
        request = parse_params(RunAgentParams, params)
        overrides = request.config
        flags = overrides.hooks or HookFlags()
        check_declared_hooks(session, flags)
        profile = self.host.profile(overrides.profile)
        run_id = request.runId or secrets.token_hex(16)
        try:
            config = agent_config(
                overrides.profile,
                profile,
                self.host.settings,
                AgentOverrides(**overrides.model_dump(exclude={"profile"})),
                {RUN_ID_LABEL: run_id},
            )
        except InvalidMessageError as error:
            raise invalid_message(error) from None
        if flags.beforeRun or flags.afterRun:
            # A one-off agent's hooks go to the connection that started it.
            one_off = HookTarget("", overrides.profile, profile, session)
            config = config.model_copy(update=self.remote.hooks(lambda: one_off, flags))
        try:
            prepared = prepare(request.input, config)  # -32010 before anything is queued
        except InvalidMessageError as error:
            raise invalid_message(error) from None
        await require_sandbox(config)
        run = self.runs.new(
            run_id, None, "oma/runAgent", session, profile=overrides.profile, kind=profile.kind
        )

        progress = progress_sender(session, run_id)

        async def execute() -> AgentRunResult:
            return await self.orchestrator.run_agent(
                config,
                prepared,
                run_id=run_id,
                metadata=request.metadata,
                permission_handler=self.remote.permission_handler(session, None),
                on_progress=progress,
                meta=request.meta,
            )

        run.cancel = lambda: self.orchestrator.cancel(run_id)
        result = await self.runs.serve(
            run, None, execute, detach=request.onDisconnect == "continue"
        )
        return result.to_wire()


def progress_sender(session: Session, run_id: str) -> ProgressCallback:
    """Sends the orchestrator's progress of run ``run_id`` to ``session`` as ``oma/progress``."""

    async def progress(event: dict[str, Any]) -> None:
        data = event.get("data")
        if isinstance(data, AgentRunResult):
            event = {**event, "data": data.to_wire()}
        await session.notify("oma/progress", {"runId": run_id, "event": event})

    return progress


def build_orchestrator(config: ServerConfig, state_dir: Path) -> OpenMultiAgent:
    """The orchestrator of ``oma/runAgent``, with evaluation when the config asks for it."""
    section = config.evaluation
    if section is None:
        return OpenMultiAgent()
    store = section.store or state_dir / "evaluations.jsonl"
    evaluation = EvaluationConfig(
        scorers=[resolve_scorer(spec) for spec in section.scorers],
        sample=section.sample,
        max_concurrent=section.max_concurrent,
        max_queue_length=section.max_queue_length,
        store=JsonlFileStore(store),
        store_payloads=section.store_payloads,
    )
    return OpenMultiAgent(evaluation=evaluation)
