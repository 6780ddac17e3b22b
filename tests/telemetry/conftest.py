"""Traces at a real OTLP/HTTP receiver (tests/support/otlp.py); skipped without the extra."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "llm"))

from daemon.conftest import short_dir
from support.otlp import OtlpReceiver

from oma_bridge import telemetry

__all__ = ["otlp", "short_dir"]


@pytest.fixture
def otlp(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    """A receiver, and tracing on towards it through the standard variables alone.

    Skips the test, with the reason, where the extra (or ``opentelemetry-proto``) is missing.
    """
    for module in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"):
        pytest.importorskip(module, reason="the otel extra is not installed")
    pytest.importorskip("opentelemetry.proto", reason="opentelemetry-proto is not installed")
    from support.otlp import otlp_receiver

    with otlp_receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # ms: spans go at once
        monkeypatch.setenv("OTEL_SERVICE_NAME", "oma-bridge-test")
        for name in ("OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "TRACEPARENT", "TRACESTATE"):
            monkeypatch.delenv(name, raising=False)
        telemetry.reset()
        try:
            yield receiver
        finally:
            telemetry.reset()  # shuts our provider down: what it held is sent first
