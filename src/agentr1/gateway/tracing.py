"""OpenTelemetry: one span per step, a child of the caller's span when the agent propagates a
trace context (the SDK does: its session span becomes the parent). Uses only the OTel API, so
nothing is recorded or exported unless a tracer provider is configured — by the embedding
application, or by :func:`configure_otlp` (``agentr1 gateway --otlp-endpoint URL``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

try:
    from opentelemetry import propagate, trace
except ImportError:  # pragma: no cover - opentelemetry-api is a gateway dependency
    propagate = trace = None  # type: ignore[assignment]


@contextmanager
def step_span(headers: Mapping[str, str], session_id: str) -> Iterator[Any]:
    if trace is None:
        yield None
        return
    parent = propagate.extract(dict(headers))
    tracer = trace.get_tracer("agentr1.gateway")
    with tracer.start_as_current_span("agentr1.step", context=parent, kind=trace.SpanKind.SERVER,
                                      attributes={"agentr1.session": session_id}) as span:
        yield span


def configure_otlp(endpoint: str, service_name: str = "agentr1-gateway") -> None:
    """Export spans over OTLP/HTTP (needs opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
