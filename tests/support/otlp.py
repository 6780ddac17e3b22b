"""An OTLP/HTTP trace receiver on 127.0.0.1: what a collector is sent, decoded.

A real HTTP server (``http.server``, in a thread) that takes ``POST
/v1/traces`` with an ``application/x-protobuf`` body, decodes it with
``opentelemetry-proto`` (``ExportTraceServiceRequest``), answers an
``ExportTraceServiceResponse`` as a collector does, and keeps every span
as a :class:`ReceivedSpan`: ids in hex, attributes as Python values.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# opentelemetry-proto is imported where a payload is decoded, so that this module (and the
# tests' fixtures) import where it is missing and the tests skip with the reason.

#: The OTLP span kinds by number (trace.proto's SpanKind).
KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


def _value(value: Any) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which) if which else None


@dataclass
class ReceivedSpan:
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_id: str | None
    attributes: dict[str, Any]
    status: str  # UNSET, OK, ERROR
    status_message: str
    service: str | None
    start_ns: int
    end_ns: int

    @classmethod
    def of(cls, span: Any, service: str | None) -> ReceivedSpan:
        from opentelemetry.proto.trace.v1.trace_pb2 import Status

        return cls(
            name=span.name,
            kind=KINDS[span.kind],
            trace_id=span.trace_id.hex(),
            span_id=span.span_id.hex(),
            parent_id=span.parent_span_id.hex() or None,
            attributes={kv.key: _value(kv.value) for kv in span.attributes},
            status=Status.StatusCode.Name(span.status.code).removeprefix("STATUS_CODE_"),
            status_message=span.status.message,
            service=service,
            start_ns=span.start_time_unix_nano,
            end_ns=span.end_time_unix_nano,
        )


@dataclass
class OtlpReceiver:
    port: int = 0
    spans: list[ReceivedSpan] = field(default_factory=list)
    #: What each request said it was (the exporter's Content-Type), for the format check.
    content_types: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def take(self, body: bytes, content_type: str) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with self.lock:
            self.content_types.append(content_type)
            for resource_spans in request.resource_spans:
                attributes = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
                service = attributes.get("service.name")
                for scope in resource_spans.scope_spans:
                    self.spans.extend(ReceivedSpan.of(span, service) for span in scope.spans)

    def named(self, prefix: str) -> list[ReceivedSpan]:
        with self.lock:
            return [span for span in self.spans if span.name.startswith(prefix)]

    def wait_for(
        self, ready: Callable[[OtlpReceiver], bool], timeout: float = 15.0
    ) -> list[ReceivedSpan]:
        """Every span so far once ``ready(self)`` holds; ``AssertionError`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready(self):
                with self.lock:
                    return list(self.spans)
            time.sleep(0.02)
        with self.lock:
            names = [span.name for span in self.spans]
        raise AssertionError(f"the receiver did not get the spans in {timeout}s: {names}")


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                ExportTraceServiceResponse,
            )

            receiver.take(body, self.headers.get("Content-Type", ""))
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
