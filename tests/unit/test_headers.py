"""Kafka header helpers: W3C trace context round-trip, content type and schema."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from contracts.headers import build_headers, extract_trace, header, trace_id_of


def test_trace_context_round_trips_through_headers() -> None:
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("producer") as span:
        headers = build_headers("nodestate.v1")
        expected = f"{span.get_span_context().trace_id:032x}"
    assert header(headers, "schema") == "nodestate.v1"
    assert header(headers, "content-type") == "application/json"
    assert trace_id_of(headers) == expected
    ctx = extract_trace(headers)
    parent = trace.get_current_span(ctx).get_span_context()
    assert f"{parent.trace_id:032x}" == expected
    assert parent.is_remote


def test_missing_traceparent_gives_empty_context() -> None:
    headers = [("schema", b"x")]
    assert trace_id_of(headers) is None
    assert not trace.get_current_span(extract_trace(headers)).get_span_context().is_valid
    assert trace_id_of([("traceparent", b"garbage")]) is None
