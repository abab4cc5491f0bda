"""Trace context for stream processors: continue each input's trace on every output.

The batch loop does not extract W3C context from input headers or inject it into what it
produces (and OpenTelemetry's aiokafka instrumentation would start new root traces), so
processors call :func:`stage_span` with the input's headers: the span is a child of the
input's producer span, and its context is passed to ``Sink.send`` so the output's
``traceparent`` names it. A fan-in (one output from several inputs) passes the other
inputs' contexts as ``links``.

This runs once per output message in every stage, so it is kept lean: a small class
instead of a ``@contextmanager`` generator, no copy of empty ``links``. The span itself
(name, kind, parent, attributes, links) is exactly what it always was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from types import TracebackType

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, set_span_in_context
from opentelemetry.util.types import AttributeValue

from contracts import telemetry as names
from contracts.headers import extract_trace

tracer = trace.get_tracer("borg.stream")

_CONSUMER = SpanKind.CONSUMER
_SYSTEM = names.MESSAGING_SYSTEM
_OPERATION = names.MESSAGING_OPERATION
_DESTINATION = names.MESSAGING_DESTINATION
_GROUP = names.MESSAGING_CONSUMER_GROUP


def link_to(headers: Sequence[tuple[str, bytes]] | None) -> Link | None:
    """A span link to the span that produced a message (None when it carried no context)."""
    ctx = trace.get_current_span(extract_trace(headers)).get_span_context()
    return Link(ctx) if ctx.is_valid else None


class _StageSpan:
    """The context manager :func:`stage_span` returns: starts the span on entry (like the
    generator it replaces) and ends it on exit, letting exceptions through."""

    __slots__ = ("_attributes", "_group", "_headers", "_links", "_name", "_span", "_topic")

    def __init__(self, name: str, headers: Sequence[tuple[str, bytes]] | None, topic: str, group: str,
                 attributes: Mapping[str, AttributeValue] | None, links: Sequence[Link]) -> None:
        self._name = name
        self._headers = headers
        self._topic = topic
        self._group = group
        self._attributes = attributes
        self._links = links
        self._span: Span | None = None

    def __enter__(self) -> tuple[Span, otel_context.Context]:
        parent = extract_trace(self._headers)
        attrs: dict[str, AttributeValue] = {
            _SYSTEM: "kafka",
            _OPERATION: "process",
            _DESTINATION: self._topic,
            _GROUP: self._group,
        }
        if self._attributes:
            attrs.update(self._attributes)  # caller attributes win, as before
        links = self._links
        span = tracer.start_span(self._name, context=parent, kind=_CONSUMER, attributes=attrs,
                                 links=list(links) if links else ())  # the SDK turns [] into () anyway
        self._span = span
        try:
            return span, set_span_in_context(span, parent)
        except BaseException:
            span.end()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._span is not None:
            self._span.end()


def stage_span(
    span_name: str,
    headers: Sequence[tuple[str, bytes]] | None,
    *,
    topic: str,
    group: str,
    attributes: Mapping[str, AttributeValue] | None = None,
    links: Sequence[Link] = (),
) -> AbstractContextManager[tuple[Span, otel_context.Context]]:
    """A CONSUMER span continuing the trace in ``headers``; the ``with`` target is the span and its context."""
    return _StageSpan(span_name, headers, topic, group, attributes, links)
