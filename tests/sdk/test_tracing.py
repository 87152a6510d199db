"""The SDK's session span is the parent of the gateway's step spans (one trace per trajectory)."""

from __future__ import annotations

import openai


def test_step_spans_are_children_of_the_session_span(gateway):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentr1.sdk import rollout

    url, _ = gateway
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

    @rollout
    def agent():
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x")
        for text in ("one", "two"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])

    agent()
    spans = exporter.get_finished_spans()
    sessions = [s for s in spans if s.name == "agentr1.session"]
    steps = [s for s in spans if s.name == "agentr1.step"]
    assert len(sessions) == 1 and len(steps) == 2
    for step in steps:
        assert step.context.trace_id == sessions[0].context.trace_id
        assert step.parent.span_id == sessions[0].context.span_id
        assert step.attributes["agentr1.session"] == sessions[0].attributes["agentr1.session"]
