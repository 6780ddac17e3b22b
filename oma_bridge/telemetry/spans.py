"""The spans of runs, through the OpenTelemetry API and SDK (imported only when tracing is on).

Names, kinds and attributes follow PROTOCOL §20.1 (the GenAI semantic
conventions): ``invoke_agent {agent}`` for a run, ``chat {model}`` for a
provider call, ``execute_tool {tool}`` for a tool call, ``invoke_workflow
{name}`` above a team's runs.  Spans are exported by a batch processor to
the OTLP/HTTP (protobuf) exporter, both configured by the standard
``OTEL_*`` variables (``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_BSP_SCHEDULE_DELAY``,
``OTEL_SERVICE_NAME``...), unless the application already installed a
tracer provider of its own, which is then used as it is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextvars import Token
from typing import Any

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from oma_bridge._version import __version__
from oma_bridge.results import AgentRunResult, StreamEvent
from oma_bridge.telemetry.keys import ENDPOINT_VARIABLES, TRACE_KEYS, content_recorded

__all__ = ["ChatSpan", "RunTrace", "Tracing", "WorkflowSpan"]

_PROPAGATOR = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
_FINAL_TOOL_STATUSES = ("completed", "failed")


def _own_provider() -> TracerProvider:
    """A provider of our own: OTLP/HTTP, the service named ``oma-bridge`` unless
    ``OTEL_SERVICE_NAME`` (or ``OTEL_RESOURCE_ATTRIBUTES``) says otherwise."""
    resource = Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME") or "oma-bridge"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


class Tracing:
    """The tracer and what it needs: made once per process, at the first traced run."""

    def __init__(self) -> None:
        current = trace.get_tracer_provider()
        # An application that set up its own SDK provider keeps it (our spans join its
        # traces and go where it sends them); otherwise one of our own, not installed
        # globally, so that this library never takes the application's place.
        self._provider: TracerProvider | None = None
        if isinstance(current, TracerProvider):
            provider: Any = current
        else:
            provider = self._provider = _own_provider()
        self.tracer: trace.Tracer = provider.get_tracer("oma_bridge", __version__)

    def parent(self, meta: Mapping[str, Any] | None) -> otel_context.Context | None:
        """The context ``meta``'s ``traceparent`` (and baggage) names, else ``None`` (current)."""
        if not meta or not any(isinstance(meta.get(key), str) for key in TRACE_KEYS):
            return None
        carrier = {key: meta[key] for key in TRACE_KEYS if isinstance(meta.get(key), str)}
        return _PROPAGATOR.extract(carrier)

    def open_run(
        self,
        name: str,
        *,
        run_id: str,
        kind: str,
        attributes: Mapping[str, Any] | None,
        meta: Mapping[str, Any] | None,
    ) -> RunTrace:
        return RunTrace(self, name, run_id, kind, attributes or {}, self.parent(meta))

    def open_workflow(
        self, name: str, *, run_id: str, meta: Mapping[str, Any] | None
    ) -> WorkflowSpan:
        return WorkflowSpan(self, name, run_id, self.parent(meta))

    def chat(self, provider: str, model: str) -> ChatSpan:
        return ChatSpan(self, provider, model)

    def downstream_meta(self, meta: Mapping[str, Any] | None) -> dict[str, Any] | None:
        out = {key: value for key, value in (meta or {}).items() if key not in TRACE_KEYS[:2]}
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
        if "traceparent" not in carrier:  # no span is current: the caller's, as given
            return dict(meta) if meta else None
        out.update(carrier)
        return out

    def child_environment(self) -> dict[str, str]:
        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier)
        if "traceparent" not in carrier:
            return {}
        env = {"TRACEPARENT": carrier["traceparent"]}
        if carrier.get("tracestate"):
            env["TRACESTATE"] = carrier["tracestate"]
        for name in ENDPOINT_VARIABLES:
            value = os.environ.get(name)
            if value:
                env[name] = value
        return env

    def shutdown(self) -> None:
        if self._provider is not None:
            self._provider.shutdown()

    def flush(self, timeout_ms: int = 5000) -> bool:
        provider: Any = self._provider or trace.get_tracer_provider()
        flush = getattr(provider, "force_flush", None)
        return bool(flush(timeout_ms)) if flush is not None else True


def _hex_ids(span: Span) -> tuple[str, str]:
    context = span.get_span_context()
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


def _json(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


class _Current:
    """A span made the current one for the code of a block (``enter``/``exit``)."""

    span: Span
    context: otel_context.Context

    def __init__(self) -> None:
        self._tokens: list[Token[otel_context.Context]] = []

    def enter(self) -> None:
        self._tokens.append(otel_context.attach(self.context))

    def exit(self) -> None:
        otel_context.detach(self._tokens.pop())

    @property
    def trace_id(self) -> str:
        return _hex_ids(self.span)[0]

    @property
    def span_id(self) -> str:
        return _hex_ids(self.span)[1]


class RunTrace(_Current):
    """The ``invoke_agent`` span of one run, and the ``execute_tool`` spans under it."""

    def __init__(
        self,
        tracing: Tracing,
        name: str,
        run_id: str,
        kind: str,
        attributes: Mapping[str, Any],
        parent: otel_context.Context | None,
    ) -> None:
        super().__init__()
        self.run_id = run_id
        self._tracer: trace.Tracer = tracing.tracer
        start = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": name,
            "oma_bridge.run.id": run_id,
            "oma_bridge.agent.kind": kind,
            **{key: value for key, value in attributes.items() if value is not None},
        }
        self.span = self._tracer.start_span(
            f"invoke_agent {start['gen_ai.agent.name']}",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=start,
        )
        self.context = trace.set_span_in_context(self.span, parent)
        self._tools: dict[str, Span] = {}

    def record_input(self, messages: Any) -> None:
        if content_recorded():
            self.span.set_attribute("gen_ai.input.messages", _json(messages))

    def observe(self, event: StreamEvent) -> None:
        """Open and close ``execute_tool`` spans from the run's stream events."""
        data = event.data
        if event.type == "tool_use" and isinstance(data, Mapping):
            call_id = str(data.get("id"))
            self._open_tool(call_id, str(data.get("name")), data.get("input"))
        elif event.type == "tool_result" and isinstance(data, Mapping):
            self._close_tool(
                str(data.get("tool_use_id")), bool(data.get("is_error")), data.get("content")
            )
        elif event.type == "update" and isinstance(data, Mapping):
            kind = data.get("sessionUpdate")
            if kind not in ("tool_call", "tool_call_update"):
                return
            acp_id = data.get("toolCallId")
            if not isinstance(acp_id, str):
                return
            if kind == "tool_call" and acp_id not in self._tools:
                title = data.get("title")
                span = self._open_tool(
                    acp_id, title if isinstance(title, str) else acp_id, data.get("rawInput")
                )
                if isinstance(data.get("kind"), str):
                    span.set_attribute("oma_bridge.tool.kind", data["kind"])
            status = data.get("status")
            if status in _FINAL_TOOL_STATUSES:
                self._close_tool(acp_id, status == "failed", data.get("rawOutput"))

    def _open_tool(self, call_id: str, name: str, arguments: Any) -> Span:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
        }
        if content_recorded() and arguments is not None:
            attributes["gen_ai.tool.call.arguments"] = _json(arguments)
        span = self._tracer.start_span(
            f"execute_tool {name}",
            context=self.context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        self._tools[call_id] = span
        return span

    def _close_tool(self, call_id: str, failed: bool, result: Any) -> None:
        span = self._tools.pop(call_id, None)
        if span is None:
            return
        if content_recorded() and result is not None:
            span.set_attribute("gen_ai.tool.call.result", _json(result))
        if failed:
            span.set_status(Status(StatusCode.ERROR, "tool_error"))
            span.set_attribute("error.type", "tool_error")
        span.end()

    def finish(self, result: AgentRunResult) -> None:
        """Put the run's outcome on the span (its status, usage, output text if recorded)."""
        span = self.span
        for call_id, tool in list(self._tools.items()):
            tool.set_attribute("oma_bridge.tool.completed", False)  # announced, never answered
            tool.end()
            del self._tools[call_id]
        status = result.status.code
        usage = result.token_usage
        attributes: dict[str, Any] = {
            "oma_bridge.run.status": status,
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
        }
        if content_recorded() and result.output:
            text = {"type": "text", "content": result.output}
            attributes["gen_ai.output.messages"] = _json([{"role": "assistant", "parts": [text]}])
        if status != "ok":
            info = result.error_info
            code = (info.code if info is not None else None) or status
            attributes["error.type"] = code
            span.set_status(Status(StatusCode.ERROR, code))
        span.set_attributes(attributes)  # at once: each call takes the span's lock

    def ended_from_outside(self) -> None:
        """The run ended with no result: a stream left early, the caller's cancel scope."""
        self.span.set_attribute("oma_bridge.run.status", "cancelled")
        self.span.set_attribute("error.type", "cancelled")
        self.span.set_status(Status(StatusCode.ERROR, "cancelled"))

    def end(self) -> None:
        for tool in self._tools.values():
            tool.end()
        self._tools.clear()
        self.span.end()


class WorkflowSpan(_Current):
    """The ``invoke_workflow`` span of a team method: its runs hang under it."""

    def __init__(
        self, tracing: Tracing, name: str, run_id: str, parent: otel_context.Context | None
    ) -> None:
        super().__init__()
        self.span = tracing.tracer.start_span(
            f"invoke_workflow {name}",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "invoke_workflow",
                "gen_ai.workflow.name": name,
                "oma_bridge.run.id": run_id,
            },
        )
        self.context = trace.set_span_in_context(self.span, parent)

    def finish(self, success: bool, code: str | None = None) -> None:
        self.span.set_attribute("oma_bridge.run.status", "ok" if success else (code or "error"))
        if not success:
            self.span.set_attribute("error.type", code or "error")
            self.span.set_status(Status(StatusCode.ERROR, code or "error"))

    def end(self) -> None:
        self.span.end()


class ChatSpan:
    """One provider call of an LLM agent: a CLIENT span with the model and the usage."""

    __slots__ = ("span",)

    def __init__(self, tracing: Tracing, provider: str, model: str) -> None:
        self.span = tracing.tracer.start_span(
            f"chat {model}",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": provider,
                "gen_ai.request.model": model,
            },
        )

    def end(
        self,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        finish_reason: str | None = None,
        error: BaseException | None = None,
    ) -> None:
        span = self.span
        attributes: dict[str, Any] = {}
        if input_tokens is not None:
            attributes["gen_ai.usage.input_tokens"] = input_tokens
        if output_tokens is not None:
            attributes["gen_ai.usage.output_tokens"] = output_tokens
        if finish_reason:
            attributes["gen_ai.response.finish_reasons"] = (finish_reason,)
        if error is not None:
            code = getattr(error, "code", None)
            kind = code if isinstance(code, str) else type(error).__name__
            attributes["error.type"] = kind
            span.set_status(Status(StatusCode.ERROR, kind))
        span.set_attributes(attributes)
        span.end()
