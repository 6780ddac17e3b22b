"""OpenTelemetry traces of runs (PROTOCOL §20.1, §20.2): optional, and free when off.

Tracing is on when the ``otel`` extra is installed and either an OTLP
endpoint variable is set (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) or a caller asked for it
(:func:`configure`: the daemon's ``[server] otel = true``, the library's
``OpenMultiAgent(opentelemetry=True)``), unless ``OTEL_SDK_DISABLED=true``
or ``OTEL_TRACES_EXPORTER=none``.  The decision is taken once, at the first
run, and then costs one attribute read per call.

This module imports nothing of ``opentelemetry``: only
:mod:`oma_bridge.telemetry.spans` does, and it is imported when tracing is
on.  Off, every function here answers ``None`` or an empty mapping, so a
run does no tracing work at all (docs/observability.md).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from oma_bridge.telemetry.keys import CONTENT, ENDPOINT_VARIABLES, content_recorded

if TYPE_CHECKING:
    from oma_bridge.telemetry.spans import ChatSpan, RunTrace, Tracing, WorkflowSpan

__all__ = [
    "EXTRA_MISSING",
    "Traceable",
    "adopted",
    "adoption",
    "chat",
    "child_environment",
    "configure",
    "content_recorded",
    "flush",
    "open_run",
    "open_workflow",
    "reset",
    "trace_meta",
    "tracing",
]

logger = logging.getLogger(__name__)

#: What :func:`configure` raises when tracing is asked for without the extra.
EXTRA_MISSING = (
    "OpenTelemetry tracing needs the otel extra: pip install 'oma-bridge[otel]' "
    "(opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http)"
)


class _State:
    """What was asked for, and what was decided (``decided`` False: not yet)."""

    requested = False
    decided = False
    live: Tracing | None = None
    warned = False


_state = _State()

#: A run span a caller opened for a run it then hands to ``Agent.run`` (the
#: orchestrator does, so its ``on_trace`` records and the OTel spans share their ids).
_adopted: ContextVar[RunTrace | None] = ContextVar("oma_bridge_adopted_run", default=None)


def _installed() -> bool:
    try:
        return (
            importlib.util.find_spec("opentelemetry.sdk") is not None
            and importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") is not None
        )
    except ModuleNotFoundError:  # a parent package missing
        return False


def _wanted(environ: Mapping[str, str]) -> bool:
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return _state.requested or any(environ.get(name) for name in ENDPOINT_VARIABLES)


def configure(*, enabled: bool | None = None, content: bool | None = None) -> None:
    """Ask for tracing (``enabled``) and for prompt and output text on spans (``content``).

    ``enabled=True`` without the extra raises ``RuntimeError`` (:data:`EXTRA_MISSING`):
    a setting that cannot be applied is refused, not ignored.  ``enabled=False`` does
    not turn off what the ``OTEL_*`` variables turned on.  The decision is taken
    again at the next run.
    """
    if enabled:
        if not _installed():
            raise RuntimeError(EXTRA_MISSING)
        _state.requested = True
    if content is not None:
        CONTENT.recorded = content
    if _state.live is None:
        _state.decided = False


def tracing() -> Tracing | None:
    """The live tracing, or ``None`` when off (decided once, at the first call)."""
    if _state.decided:
        return _state.live
    _state.decided = True
    if not _wanted(os.environ):
        return None
    if not _installed():
        if not _state.warned:
            _state.warned = True
            logger.warning(
                "OTEL_* variables are set but the otel extra is not installed: %s", EXTRA_MISSING
            )
        return None
    from oma_bridge.telemetry.spans import Tracing

    _state.live = Tracing()
    return _state.live


class Traceable(Protocol):
    """What a run's span needs of its agent (``Agent`` itself: no import of it here)."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    trace_attributes: dict[str, Any]


def open_run(
    agent: Traceable, *, run_id: str, meta: Mapping[str, Any] | None = None
) -> RunTrace | None:
    """Start an ``invoke_agent {agent.name}`` span, child of ``meta``'s trace context if
    any, else of the current one; ``None`` when tracing is off."""
    live = tracing()
    if live is None:
        return None
    return live.open_run(
        agent.name, run_id=run_id, kind=agent.kind, attributes=agent.trace_attributes, meta=meta
    )


@contextlib.contextmanager
def adopted(trace: RunTrace | None) -> Iterator[None]:
    """Within the block, ``Agent`` runs with ``trace``'s run id use ``trace`` as their span."""
    if trace is None:
        yield
        return
    token = _adopted.set(trace)
    try:
        yield
    finally:
        _adopted.reset(token)


def adoption(run_id: str) -> RunTrace | None:
    """The span a caller opened for ``run_id`` (see :func:`adopted`), if any."""
    trace = _adopted.get()
    return trace if trace is not None and trace.run_id == run_id else None


def open_workflow(
    name: str, *, run_id: str, meta: Mapping[str, Any] | None = None
) -> WorkflowSpan | None:
    """Start an ``invoke_workflow {name}`` span above a team's runs; ``None`` when off."""
    live = tracing()
    if live is None:
        return None
    return live.open_workflow(name, run_id=run_id, meta=meta)


def chat(provider: str, model: str) -> ChatSpan | None:
    """Start a ``chat {model}`` span under the current run's; ``None`` when off."""
    live = _state.live if _state.decided else tracing()
    if live is None:
        return None
    return live.chat(provider, model)


def trace_meta(meta: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``meta`` with the current span's ``traceparent`` and ``tracestate`` in place of the
    caller's: what goes downstream in a ``session/prompt``'s ``_meta``."""
    live = _state.live if _state.decided else tracing()
    if live is None:
        return dict(meta) if meta else None
    return live.downstream_meta(meta)


def child_environment() -> dict[str, str]:
    """``TRACEPARENT``/``TRACESTATE`` of the current span (and the OTLP endpoint when set),
    for a process the daemon starts; empty when tracing is off or no span is current."""
    live = _state.live if _state.decided else tracing()
    if live is None:
        return {}
    return live.child_environment()


def flush(timeout_ms: int = 5000) -> bool:
    """Export the spans buffered so far (the daemon's stop); ``True`` when all went.

    Blocking (an HTTP request): call it from a worker thread in async code.  The
    provider itself is shut down at the interpreter's exit.
    """
    if _state.live is None:
        return True
    return _state.live.flush(timeout_ms)


def reset() -> None:
    """Forget the decision and what was asked (tests; a daemon that reads its config again)."""
    if _state.live is not None:
        _state.live.shutdown()
    _state.live = None
    _state.decided = False
    _state.requested = False
    CONTENT.recorded = False
