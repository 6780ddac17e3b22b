"""The keys :mod:`oma_bridge.telemetry` reads and whether spans carry text, shared with its spans.

A leaf below both the package (which decides whether tracing is on) and
:mod:`.spans` (which makes the spans), so that neither imports the other back.
"""

from __future__ import annotations

__all__ = ["CONTENT", "ENDPOINT_VARIABLES", "TRACE_KEYS", "content_recorded"]

#: The variables that turn tracing on by themselves (the OTLP/HTTP exporter's).
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")

#: The W3C trace-context keys of a request's ``_meta`` (PROTOCOL §20.2).
TRACE_KEYS = ("traceparent", "tracestate", "baggage")


class _Content:
    """Whether prompt and output text go on spans (set by ``telemetry.configure``)."""

    recorded = False


CONTENT = _Content()


def content_recorded() -> bool:
    """Whether prompt and output text go on spans (``[server] otel_content = true``)."""
    return CONTENT.recorded
