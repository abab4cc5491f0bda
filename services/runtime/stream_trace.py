"""Trace context for stream processors: continue each input's trace on every output.

The batch loop does not extract W3C context from input headers or inject it into what it
produces (and OpenTelemetry's aiokafka instrumentation would start new root traces), so
processors call :func:`stage_span` with the input's headers: the span is a child of the
input's producer span, and its context is passed to ``Sink.send`` so the output's
``traceparent`` names it. A fan-in (one output from several inputs) passes the other
inputs' contexts as ``links``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind
from opentelemetry.util.types import AttributeValue

from contracts import telemetry as names
from contracts.headers import extract_trace

tracer = trace.get_tracer("borg.stream")


def link_to(headers: Sequence[tuple[str, bytes]] | None) -> Link | None:
    """A span link to the span that produced a message (None when it carried no context)."""
    ctx = trace.get_current_span(extract_trace(headers)).get_span_context()
    return Link(ctx) if ctx.is_valid else None


@contextmanager
def stage_span(
    span_name: str,
    headers: Sequence[tuple[str, bytes]] | None,
    *,
    topic: str,
    group: str,
    attributes: Mapping[str, AttributeValue] | None = None,
    links: Sequence[Link] = (),
) -> Iterator[tuple[Span, otel_context.Context]]:
    """A CONSUMER span continuing the trace in ``headers``; yields the span and its context."""
    parent = extract_trace(headers)
    attrs: dict[str, AttributeValue] = {
        names.MESSAGING_SYSTEM: "kafka",
        names.MESSAGING_OPERATION: "process",
        names.MESSAGING_DESTINATION: topic,
        names.MESSAGING_CONSUMER_GROUP: group,
    }
    attrs.update(attributes or {})
    span = tracer.start_span(span_name, context=parent, kind=SpanKind.CONSUMER, attributes=attrs,
                             links=list(links))
    try:
        yield span, trace.set_span_in_context(span, parent)
    finally:
        span.end()
