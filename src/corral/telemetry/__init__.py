"""Observability shared by every corral process: Prometheus families, OTLP export, trace propagation.

`families` holds the metric families (one process-wide Prometheus registry, the one `/metrics`
serves); `labels` binds their children once per model so the warm path never builds a label dict;
`tracing` is OpenTelemetry tracing and W3C trace-context propagation, a no-op unless
`OTEL_EXPORTER_OTLP_ENDPOINT` is set; `otlp` starts the OTLP exporters (spans, and the Prometheus
registry bridged to OTLP metrics by `otlp_metrics`).
"""
