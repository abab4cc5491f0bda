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


def test_tracestate_is_carried_to_the_child_span_and_its_output() -> None:
    tracer = TracerProvider().get_tracer("test")
    parent = extract_trace([("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
                            ("tracestate", b"rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")])
    with tracer.start_as_current_span("child", context=parent) as span:
        headers = build_headers("regimes.v2")
    assert header(headers, "tracestate") == "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
    span_id = span.get_span_context().span_id
    assert header(headers, "traceparent") == f"00-0af7651916cd43dd8448eb211c80319c-{span_id:016x}-01"


def test_build_headers_is_a_fresh_list_of_bytes_values() -> None:
    first = build_headers("features.v1")
    first.append(("x", b"y"))
    second = build_headers("features.v1")
    assert second == [("content-type", b"application/json"), ("schema", b"features.v1")]
    assert build_headers("schéma")[1] == ("schema", "schéma".encode())
