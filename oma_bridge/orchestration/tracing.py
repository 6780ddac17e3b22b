"""Trace spans of a run for ``on_trace``, derived from its stream events; the OTel glue.

``agent`` is the root span of a run; ``llm_call`` and ``tool_call`` spans
hang under it (see :class:`RunTracer`).  Each closed span goes to the
``on_trace`` observer.  With OpenTelemetry tracing on (:mod:`oma_bridge.telemetry`)
the run's ``invoke_agent`` span is opened here (:func:`open_run_trace`) and
``Agent.run`` adopts it, so that the ``traceId`` and root ``spanId`` of the
records are those of the exported spans: one trace, seen by two observers.
Team methods open one ``invoke_workflow`` span above their runs
(:func:`workflow_span`).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

from oma_bridge import telemetry
from oma_bridge.callbacks import invoke
from oma_bridge.results import AgentRunResult, RunIdentity, StreamEvent

if TYPE_CHECKING:
    from oma_bridge.agent import Agent
    from oma_bridge.telemetry.spans import RunTrace, WorkflowSpan

__all__ = [
    "RunTracer",
    "Span",
    "TraceCallback",
    "call_quietly",
    "open_run_trace",
    "workflow_span",
]

logger = logging.getLogger("oma_bridge.orchestration.orchestrator")

#: ``on_trace(span)`` at the end of each span; sync or async; errors are swallowed.
TraceCallback: TypeAlias = Callable[[dict[str, Any]], Any]


async def call_quietly(callback: Callable[[Any], Any], value: Any, what: str) -> None:
    """Observers never break a run: log what they raise and go on."""
    try:
        await invoke(callback, value)
    except Exception:
        logger.exception("%s callback raised; ignored", what)


class Span:
    __slots__ = ("attributes", "kind", "name", "parent_id", "span_id", "start")

    def __init__(self, kind: str, name: str, span_id: str, parent_id: str | None) -> None:
        self.kind = kind
        self.name = name
        self.span_id = span_id
        self.parent_id = parent_id
        self.start = time.time()
        self.attributes: dict[str, Any] = {}


class RunTracer:
    """Derives the spans of one run from its stream events.

    ``agent`` is the root span.  For LLM agents an ``llm_call`` span covers
    each model turn: it opens when the run starts and again once every tool
    of the previous turn has answered, and closes at the turn's first
    ``tool_use`` or at the end.  A ``tool_call`` span runs from a
    ``tool_use`` event to the ``tool_result`` with its id.
    """

    def __init__(
        self,
        identity: RunIdentity,
        agent_name: str,
        *,
        llm: bool,
        on_trace: TraceCallback | None,
    ) -> None:
        self.identity = identity
        self.agent_name = agent_name
        self.llm = llm
        self.on_trace = on_trace
        self.finished: list[dict[str, Any]] = []
        self.root = self._open("agent", agent_name, span_id=identity.root_span_id, parent=None)
        self.llm_span: Span | None = None
        self.tools: dict[str, Span] = {}
        self.turns = 0
        if llm:
            self._open_llm_call()

    def _open(self, kind: str, name: str, *, span_id: str | None, parent: Span | None) -> Span:
        return Span(kind, name, span_id or secrets.token_hex(8), parent.span_id if parent else None)

    def _open_llm_call(self) -> None:
        self.turns += 1
        self.llm_span = self._open("llm_call", f"turn {self.turns}", span_id=None, parent=self.root)

    async def observe(self, event: StreamEvent) -> None:
        if event.type == "tool_use" and isinstance(event.data, Mapping):
            if self.llm_span is not None:
                await self._close(self.llm_span)
                self.llm_span = None
            span = self._open(
                "tool_call", str(event.data.get("name")), span_id=None, parent=self.root
            )
            span.attributes["toolUseId"] = event.data.get("id")
            self.tools[str(event.data.get("id"))] = span
        elif event.type == "tool_result" and isinstance(event.data, Mapping):
            tool_use_id = str(event.data.get("tool_use_id"))
            if tool_use_id in self.tools:
                span = self.tools.pop(tool_use_id)
                span.attributes["isError"] = bool(event.data.get("is_error", False))
                await self._close(span)
            if self.llm and not self.tools and self.llm_span is None:
                self._open_llm_call()

    async def finish(self, result: AgentRunResult) -> None:
        if self.llm_span is not None:
            await self._close(self.llm_span)
        for span in self.tools.values():
            span.attributes["completed"] = False  # announced, never answered (a budget stop)
            await self._close(span)
        self.root.attributes.update(
            {
                "status": result.status.code,
                "inputTokens": result.token_usage.input_tokens,
                "outputTokens": result.token_usage.output_tokens,
            }
        )
        await self._close(self.root)

    async def _close(self, span: Span) -> None:
        end = time.time()
        record = {
            "type": span.kind,
            "name": span.name,
            "agent": self.agent_name,
            "runId": self.identity.run_id,
            "traceId": self.identity.trace_id,
            "spanId": span.span_id,
            "parentId": span.parent_id,
            "startTime": round(span.start * 1000, 3),
            "endTime": round(end * 1000, 3),
            "durationMs": round((end - span.start) * 1000, 3),
            "attributes": dict(span.attributes),
        }
        self.finished.append(record)
        if self.on_trace is not None:
            await call_quietly(self.on_trace, record, "on_trace")


def open_run_trace(
    agent: Agent, identity: RunIdentity, run_id: str, meta: Mapping[str, Any] | None
) -> tuple[RunTrace | None, RunIdentity]:
    """The run's ``invoke_agent`` span (``None``: tracing off) and the identity that names it."""
    trace = telemetry.open_run(agent, run_id=run_id, meta=meta)
    if trace is None:
        return None, identity
    return trace, RunIdentity(identity.run_id, identity.attempt, trace.trace_id, trace.span_id)


@contextlib.contextmanager
def workflow_span(
    name: str, run_id: str, meta: Mapping[str, Any] | None
) -> Iterator[WorkflowSpan | None]:
    """An ``invoke_workflow {name}`` span, current within the block (``None``: tracing off).

    The block's runs (and the tasks their task groups start, which copy the
    context) are its children.  Left by an exception, the span says so.
    """
    span = telemetry.open_workflow(name, run_id=run_id, meta=meta)
    if span is None:
        yield None
        return
    span.enter()
    try:
        yield span
    except BaseException as error:
        span.finish(False, type(error).__name__)
        raise
    finally:
        span.exit()
        span.end()
