"""Trace context travels as W3C `traceparent`; with tracing off every helper is a no-op."""

from __future__ import annotations

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from corral.telemetry import tracing


def test_off_costs_nothing_and_adds_nothing() -> None:
    assert tracing.tracer is None
    base = (("authorization", "Bearer t"),)
    assert tracing.grpc_metadata(base) is base
    assert tracing.headers() is None and tracing.start_client_span("x", {}) is None
    with tracing.span("nothing") as span:
        assert span is None


def test_a_child_joins_the_parent_carried_in_metadata(spans: InMemorySpanExporter) -> None:
    with tracing.span("frontend request"):
        client = tracing.start_client_span("backend Predict", {})
        assert client is not None
        metadata = tracing.metadata_for(client, (("authorization", "Bearer t"),))
        tracing.finish(client)
    assert metadata[0] == ("authorization", "Bearer t") and metadata[1][0] == "traceparent"
    with tracing.span("backend.Predict", context=tracing.extract(metadata)):
        pass
    by_name = {s.name: s for s in spans.get_finished_spans()}
    child, client_span = by_name["backend.Predict"], by_name["backend Predict"]
    assert child.context.trace_id == by_name["frontend request"].context.trace_id
    assert child.parent is not None and child.parent.span_id == client_span.context.span_id
