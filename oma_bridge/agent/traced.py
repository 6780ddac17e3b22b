"""The ``invoke_agent`` span of one ``Agent`` run (PROTOCOL §20.1), when tracing is on.

``Agent`` asks :func:`start` at the beginning of every run: ``None`` when
tracing is off (one check, nothing else), else a :class:`TracedRun` that
opens the run's span (or takes the one a caller opened for this run id:
the orchestrator's, so that its ``on_trace`` records carry the same ids),
makes it the current span for the backend's work (its ``chat`` spans, the
``TRACEPARENT`` of the processes it starts), sends its ``traceparent``
downstream in the request's ``_meta``, and derives ``execute_tool`` spans
from the run's stream events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from oma_bridge import telemetry
from oma_bridge.backends import Emit
from oma_bridge.messages import LLMMessage
from oma_bridge.results import AgentRunResult, StreamEvent

if TYPE_CHECKING:
    from oma_bridge.telemetry.spans import RunTrace

__all__ = ["TracedRun", "start"]


class TracedRun:
    """One run's span while the run goes on: entered at :func:`start`, left at :meth:`end`."""

    __slots__ = ("owned", "trace")

    def __init__(self, trace: RunTrace, owned: bool) -> None:
        self.trace = trace
        self.owned = owned

    def emit(self, emit: Emit) -> Emit:
        observe = self.trace.observe

        async def traced(event: StreamEvent) -> None:
            observe(event)
            await emit(event)

        return traced

    def end(self, result: AgentRunResult | None) -> None:
        """Leave the span; close it when this run opened it (the adopter closes its own).

        ``None``: the run was ended from outside with no result (a stream left
        early, the caller's own cancel scope).
        """
        self.trace.exit()
        if not self.owned:
            return
        if result is not None:
            self.trace.finish(result)
        else:
            self.trace.ended_from_outside()
        self.trace.end()


def start(
    agent: telemetry.Traceable,
    run_id: str,
    meta: Mapping[str, Any] | None,
    messages: list[LLMMessage],
) -> tuple[TracedRun | None, Mapping[str, Any] | None]:
    """The run's span, entered, and the ``_meta`` to send downstream (``None``: tracing off)."""
    trace = telemetry.adoption(run_id)
    owned = trace is None
    if trace is None:
        trace = telemetry.open_run(agent, run_id=run_id, meta=meta)
        if trace is None:
            return None, meta
    trace.record_input(messages)
    trace.enter()
    # Only an ACP agent sends a request's _meta on (its session/prompt's): the other
    # kinds are spared the encoding.
    downstream = telemetry.trace_meta(meta) if agent.kind == "acp" else meta
    return TracedRun(trace, owned), downstream
