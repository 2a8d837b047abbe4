"""OpenTelemetry tracing and W3C trace-context propagation, off (and free) unless configured.

`tracer` stays None until `otlp.configure` finds `OTEL_EXPORTER_OTLP_ENDPOINT`; the warm path
tests `tracing.tracer is None` and does nothing else. When on, the context of the current span
travels as a `traceparent` header: in gRPC metadata to backends, NATS headers to workers (backend
install) and HTTP headers to workers' file servers (staging), so their spans join the request's trace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import (
    Span,
    SpanKind,
    Status,
    StatusCode,
    Tracer,
    get_current_span,
    set_span_in_context,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACE_HEADERS = ("traceparent", "tracestate")
_PROPAGATOR = TraceContextTextMapPropagator()

tracer: Tracer | None = None  # set by otlp.configure; None means tracing is off


def enable(active: Tracer | None) -> None:
    global tracer
    tracer = active


@contextlib.contextmanager
def span(
    name: str,
    attributes: dict[str, Any] | None = None,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    context: Context | None = None,
) -> Iterator[Span | None]:
    """A span around the block (the current span while it runs), or nothing when tracing is off."""
    if tracer is None:
        yield None
        return
    with tracer.start_as_current_span(name, context=context, kind=kind, attributes=attributes) as current:
        yield current


def annotate(attributes: dict[str, Any]) -> None:
    """Set attributes on the current span (nothing when tracing is off or no span is current)."""
    if tracer is not None:
        get_current_span().set_attributes(attributes)


def start_client_span(name: str, attributes: dict[str, Any]) -> Span | None:
    """A client span (child of the current one) the caller ends with `finish`; None when tracing is off."""
    if tracer is None:
        return None
    return tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)


def finish(span: Span | None, error: BaseException | None = None) -> None:
    if span is None:
        return
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:200]))
    span.end()


def metadata_for(span: Span, base: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """`base` gRPC metadata plus `span`'s context, so the backend's span is its child."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=set_span_in_context(span))
    return (*base, *carrier.items())


def headers() -> dict[str, str] | None:
    """The current span's context as `traceparent`/`tracestate` headers; None when tracing is off."""
    if tracer is None:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier or None


def grpc_metadata(base: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """`base` gRPC metadata plus the current trace context (`base` itself when tracing is off)."""
    carrier = headers()
    return (*base, *carrier.items()) if carrier else base


def extract(carrier: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> Context | None:
    """The remote parent context carried by headers or metadata (keys compared lower-case), if any."""
    if tracer is None or not carrier:
        return None
    pairs = carrier.items() if isinstance(carrier, Mapping) else carrier
    found = {str(k).lower(): v for k, v in pairs if str(k).lower() in TRACE_HEADERS and isinstance(v, str)}
    return _PROPAGATOR.extract(found) if found else None
