"""OTLP export, on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set.

Each process calls `configure(<service>)` at start: spans go through a batch processor to the
OTLP/HTTP (protobuf) exporter, which reads the standard OTEL_* variables (endpoint, headers,
timeout; OTEL_BSP_SCHEDULE_DELAY for the batch delay; OTEL_SERVICE_NAME overrides the service
name). A process that also exports metrics runs `Telemetry.bridge` (the Prometheus registry over
OTLP). `shutdown()` flushes what is buffered. With no endpoint set nothing is imported or started,
and `tracing.tracer` stays None.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from corral.telemetry import tracing

if TYPE_CHECKING:  # imported only when OTLP export is on
    from opentelemetry.sdk.trace import TracerProvider

    from corral.telemetry.otlp_metrics import MetricsBridge

log = logging.getLogger(__name__)

ENDPOINT_ENVS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
METRICS_ENDPOINT_ENVS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")


@dataclass
class Telemetry:
    provider: TracerProvider
    bridge: MetricsBridge | None = None  # when metrics are exported

    def shutdown(self) -> None:
        """Flush buffered spans (and a last metrics export) and stop the exporters."""
        tracing.enable(None)
        if self.bridge is not None:
            try:
                self.bridge.export_now()
            except Exception as exc:  # a collector that went away must not stop the shutdown
                log.debug("last OTLP metrics export failed: %s", exc)
            self.bridge.shutdown()
        self.provider.shutdown()


def enabled(environ: dict[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(env.get(name, "").strip() for name in ENDPOINT_ENVS)


def configure(service: str, *, metrics: bool = False) -> Telemetry | None:
    """Start OTLP export for this process as `service` (traces; metrics too when asked); None when off."""
    if not enabled():
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": service})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    tracing.enable(provider.get_tracer("corral"))
    telemetry = Telemetry(provider)
    if metrics and any(os.environ.get(name, "").strip() for name in METRICS_ENDPOINT_ENVS):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        from corral.telemetry.otlp_metrics import MetricsBridge

        telemetry.bridge = MetricsBridge(OTLPMetricExporter(), resource)
    log.info(
        "OpenTelemetry: exporting %s over OTLP as %s",
        "traces and metrics" if telemetry.bridge else "traces",
        resource.attributes.get("service.name"),
    )
    return telemetry
