"""A stand-in OpenTelemetry collector: a small HTTP server on loopback that accepts OTLP/HTTP protobuf
(`POST /v1/traces`, `POST /v1/metrics`), decodes it with opentelemetry-proto and keeps what arrived."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, str]


def _service(resource: object) -> str:
    for attr in resource.attributes:  # type: ignore[attr-defined]
        if attr.key == "service.name":
            return str(attr.value.string_value)
    return ""


class Collector:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.metric_names: dict[str, set[str]] = {}  # service -> metric names received
        self.metric_points: dict[str, object] = {}  # metric name -> its latest OTLP Metric message
        self._lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/v1/traces":
                    collector._traces(body)
                    answer = ExportTraceServiceResponse().SerializeToString()
                elif self.path == "/v1/metrics":
                    collector._metrics(body)
                    answer = ExportMetricsServiceResponse().SerializeToString()
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="otlp-collector", daemon=True)

    def __enter__(self) -> Collector:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _traces(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        with self._lock:
            for resource_spans in request.resource_spans:
                service = _service(resource_spans.resource)
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        attributes = {
                            a.key: str(a.value.string_value or a.value.int_value) for a in span.attributes
                        }
                        self.spans.append(
                            ReceivedSpan(
                                service,
                                span.name,
                                span.trace_id.hex(),
                                span.span_id.hex(),
                                span.parent_span_id.hex(),
                                attributes,
                            )
                        )

    def _metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest.FromString(body)
        with self._lock:
            for resource_metrics in request.resource_metrics:
                names = self.metric_names.setdefault(_service(resource_metrics.resource), set())
                for scope in resource_metrics.scope_metrics:
                    for metric in scope.metrics:
                        names.add(metric.name)
                        self.metric_points[metric.name] = metric

    def spans_named(self, name: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.name == name]

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]
