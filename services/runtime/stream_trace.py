"""Trace context for stream processors: continue each input's trace on every output.

The batch loop does not extract W3C context from input headers or inject it into what it
produces (and OpenTelemetry's aiokafka instrumentation would start new root traces), so
processors call :func:`stage_span` with the input's headers: the span is a child of the
input's producer span, and the context it yields is passed to ``Sink.send``, which opens the
output's PRODUCER span (:func:`publish_span`) below it; the output's ``traceparent`` names that
producer span. A fan-in (one output from several inputs) passes the other inputs' contexts as
``links``.

Both run once per output message in every stage, so in the common cases their spans are made by
``services.runtime.trace_fastpath`` (the same spans as ``Tracer.start_span`` makes, without its
per-span overhead; it switches itself off when the SDK it mirrors changes); every other case
goes through the SDK here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from types import TracebackType

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, Status, StatusCode, set_span_in_context
from opentelemetry.util.types import AttributeValue

from contracts import telemetry as names
from contracts.fast.traceparent import span_context_in
from contracts.headers import extract_trace, remote_parent
from services.runtime import trace_fastpath as fast

tracer: trace.Tracer = trace.get_tracer("borg.stream")
producer_tracer: trace.Tracer = trace.get_tracer("borg.runtime")
"""The outputs' PRODUCER spans (the scope the agents' and the referee's producer spans always had)."""

_CONSUMER = fast.CONSUMER
_PRODUCER = fast.PRODUCER
_SYSTEM = names.MESSAGING_SYSTEM
_OPERATION = names.MESSAGING_OPERATION
_OPERATION_NAME = names.MESSAGING_OPERATION_NAME
_DESTINATION = names.MESSAGING_DESTINATION
_GROUP = names.MESSAGING_CONSUMER_GROUP


def link_to(headers: Sequence[tuple[str, bytes]] | None) -> Link | None:
    """A span link to the span that produced a message (None when it carried no context)."""
    ctx = trace.get_current_span(extract_trace(headers)).get_span_context()
    return Link(ctx) if ctx.is_valid else None


class _StageSpan:
    """The context manager :func:`stage_span` returns: starts the span on entry and ends it on
    exit, letting exceptions through (nothing is recorded on the span, as before)."""

    __slots__ = ("_attributes", "_direct_span", "_group", "_headers", "_links", "_name", "_span", "_topic")

    def __init__(self, name: str, headers: Sequence[tuple[str, bytes]] | None, topic: str, group: str,
                 attributes: Mapping[str, AttributeValue] | None, links: Sequence[Link]) -> None:
        self._name = name
        self._headers = headers
        self._topic = topic
        self._group = group
        self._attributes = attributes
        self._links = links
        self._span: trace.Span | None = None
        self._direct_span: fast.DirectSpan | None = None

    def __enter__(self) -> otel_context.Context:
        links = self._links
        direct = None if links else fast.view(tracer, producer=False)  # links: the SDK validates them
        if direct is not None and not direct.processors:
            # nothing would see the span (no OTLP endpoint): only its context matters, and that does
            # not depend on the attributes, so they are not even gathered (docs/performance.md)
            remote = remote_parent(self._headers)
            if remote is not None:
                if remote.trace_flags.sampled:
                    return span_context_in(fast.child_of(direct, remote))
                return span_context_in(fast.unsampled_child(direct, remote))
        attrs: dict[str, AttributeValue] = {
            _SYSTEM: "kafka",
            _OPERATION: "process",
            _DESTINATION: self._topic,
            _GROUP: self._group,
        }
        if self._attributes:
            attrs.update(self._attributes)  # caller attributes win, as before
        if direct is not None and len(attrs) <= direct.max_attributes and fast.plain(attrs, self._attributes):
            remote = remote_parent(self._headers)
            if remote is not None:
                # the usual input: a parent read straight from the header (no parent Context
                # built and read back); the same child as below
                if not remote.trace_flags.sampled:
                    return span_context_in(fast.unsampled_child(direct, remote))
                context = fast.child_of(direct, remote)
                if direct.processors:  # none: nothing would see the span, only its ids matter
                    self._direct_span = fast.DirectSpan(direct, self._name, context, remote, attrs)
                return span_context_in(context)
            parent = extract_trace(self._headers)
            parent_context = trace.get_current_span(parent).get_span_context()
            made = fast.direct_context(direct, parent_context)
            if made is not None:
                context, sampled = made
                if sampled and direct.processors:
                    self._direct_span = fast.DirectSpan(direct, self._name, context,
                                                        parent_context if parent_context.is_valid else None, attrs)
                return set_span_in_context(NonRecordingSpan(context), parent)
        parent = extract_trace(self._headers)
        sdk_span = tracer.start_span(self._name, context=parent, kind=_CONSUMER, attributes=attrs,
                                     links=list(links) if links else ())  # the SDK turns [] into () anyway
        self._span = sdk_span
        try:
            return set_span_in_context(sdk_span, parent)
        except BaseException:
            sdk_span.end()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._direct_span is not None:
            self._direct_span.finish()
        elif self._span is not None:
            self._span.end()


def stage_span(
    span_name: str,
    headers: Sequence[tuple[str, bytes]] | None,
    *,
    topic: str,
    group: str,
    attributes: Mapping[str, AttributeValue] | None = None,
    links: Sequence[Link] = (),
) -> AbstractContextManager[otel_context.Context]:
    """A CONSUMER span continuing the trace in ``headers``; the ``with`` target is the context to
    produce under (``Sink.send(..., ctx)``), whose current span is this one."""
    return _StageSpan(span_name, headers, topic, group, attributes, links)


class Publish:
    """What one output topic's PRODUCER spans share: the span name and the (read-only) attributes."""

    __slots__ = ("attributes", "name")

    def __init__(self, base_topic: str, topic: str) -> None:
        self.name = names.SPAN_PUBLISH.format(topic=base_topic)
        # one mapping for every span of the topic: neither path changes it (the SDK copies it)
        self.attributes: Mapping[str, AttributeValue] = {
            _SYSTEM: "kafka", _OPERATION: "send", _OPERATION_NAME: "send", _DESTINATION: topic}


class _PublishSpan:
    """The context manager :func:`publish_span` returns."""

    __slots__ = ("_context", "_direct_span", "_publish", "_span")

    def __init__(self, publish: Publish, ctx: otel_context.Context | None) -> None:
        self._publish = publish
        self._context = ctx
        self._span: trace.Span | None = None
        self._direct_span: fast.DirectSpan | None = None

    def __enter__(self) -> otel_context.Context:
        publish = self._publish
        direct = fast.view(producer_tracer, producer=True)
        if direct is not None and len(publish.attributes) <= direct.max_attributes:
            parent = trace.get_current_span(self._context).get_span_context()
            made = fast.direct_context(direct, parent)
            if made is not None:
                context, sampled = made
                if sampled and direct.processors:
                    self._direct_span = fast.DirectSpan(direct, publish.name, context,
                                                        parent if parent.is_valid else None, publish.attributes,
                                                        _PRODUCER)
                return span_context_in(context)
        span = producer_tracer.start_span(publish.name, context=self._context, kind=_PRODUCER,
                                          attributes=publish.attributes)
        self._span = span
        return set_span_in_context(span, self._context)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        # as ``start_as_current_span`` does: an Exception (not a cancellation) is recorded on the span
        failed = exc if isinstance(exc, Exception) else None
        if self._direct_span is not None:
            if failed is None:
                self._direct_span.finish()
            else:
                self._direct_span.fail(failed)
        elif self._span is not None:
            if failed is not None and self._span.is_recording():
                self._span.record_exception(failed)
                self._span.set_status(Status(StatusCode.ERROR, f"{type(failed).__name__}: {failed}"))
            self._span.end()


def quiet_stage(headers: Sequence[tuple[str, bytes]] | None) -> SpanContext | None:
    """The context of the stage span :func:`stage_span` would make for an input with ``headers`` when no
    span processor would see the span (None: use :func:`stage_span`).

    For the one output per input of a stage without an OTLP endpoint: with ``Sink.send_quiet`` the
    stage span, the output's producer span and its headers are one step, with no ``Context`` or
    span object in between (docs/performance.md). The ids are drawn as :func:`stage_span` draws them.
    """
    direct = fast.view(tracer, producer=False)
    if direct is None or direct.processors:
        return None
    remote = remote_parent(headers)
    if remote is None:  # no traceparent (a new root), or one only the propagator may read
        made = fast.direct_context(direct, trace.get_current_span(extract_trace(headers)).get_span_context())
        return None if made is None else made[0]
    if remote.trace_flags.sampled:
        return fast.child_of(direct, remote)
    return fast.unsampled_child(direct, remote)


def quiet_child(parent: SpanContext) -> SpanContext | None:
    """The context of an output's PRODUCER span under the stage span ``parent`` when no span processor
    would see the span (None: make it with :func:`publish_span`, e.g. under ``span_context_in(parent)``)."""
    direct = fast.view(producer_tracer, producer=True)
    if direct is None or direct.processors:
        return None
    made = fast.direct_context(direct, parent)
    return None if made is None else made[0]


def quiet_publish(ctx: otel_context.Context | None) -> SpanContext | None:
    """The context of an output's PRODUCER span when no span processor would see the span (None: make
    it with :func:`publish_span`).

    Without processors (no OTLP endpoint) the span itself is never looked at, only the context its
    ``traceparent`` carries: the child of the span in ``ctx`` (the stage span) drawn as
    :func:`publish_span` draws it, without the ``with`` block and the context built around it.
    """
    return quiet_child(trace.get_current_span(ctx).get_span_context())


def publish_span(publish: Publish, ctx: otel_context.Context | None) -> AbstractContextManager[otel_context.Context]:
    """The PRODUCER span of one output (``<topic> publish``, a child of the span in ``ctx``: the
    stage span of the record it answers; the current span when ``ctx`` is None); the ``with``
    target is the context whose ``traceparent`` the output carries, so the consumer downstream
    continues from this span. Made like :func:`stage_span`'s spans: directly in the common case,
    an unsampled parent's child for the cost of a span id."""
    return _PublishSpan(publish, ctx)
