"""An output's PRODUCER span (``stream_trace.publish_span``, used by every ``Sink``) is the span the
agents' ``Sink`` always made through ``Tracer.start_as_current_span``: same ids, flags, parent,
attributes, status and header bytes, whether the direct path or the SDK made it.

The oracle is the old ``Sink.send`` code verbatim; each case runs it and the new path on the same
deterministic ids and compares the headers and every finished span.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind

from contracts import headers as hdr
from contracts import telemetry as names
from services.runtime import stream_trace, trace_fastpath
from tests.unit.test_trace_fastpath import _SeededIds, random_traceparent

TP = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
PUBLISH = stream_trace.Publish("features.v1", "p-features.v1")


def old_publish(ctx: otel_context.Context | None, fail: bool = False) -> list[tuple[str, bytes]]:
    """What ``Sink.send`` did with ``producer_spans=True`` before the stages had producer spans."""
    with stream_trace.producer_tracer.start_as_current_span(
        names.SPAN_PUBLISH.format(topic="features.v1"), context=ctx, kind=SpanKind.PRODUCER,
        attributes={names.MESSAGING_SYSTEM: "kafka", names.MESSAGING_OPERATION: "send",
                    names.MESSAGING_OPERATION_NAME: "send", names.MESSAGING_DESTINATION: "p-features.v1"},
    ) as span:
        out = hdr.build_headers("features.v1", trace.set_span_in_context(span))
        if fail:
            raise RuntimeError("broker gone")
        return out


def new_publish(ctx: otel_context.Context | None, fail: bool = False) -> list[tuple[str, bytes]]:
    with stream_trace.publish_span(PUBLISH, ctx) as out_ctx:
        out = hdr.build_headers("features.v1", out_ctx)
        if fail:
            raise RuntimeError("broker gone")
        return out


class _Setup:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, sampler: Any) -> None:
        self.ids = _SeededIds(random_ids=True)
        self.provider = TracerProvider(sampler=sampler, id_generator=self.ids, shutdown_on_exit=False)
        self.exporter = InMemorySpanExporter()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        monkeypatch.setattr(stream_trace, "tracer", self.provider.get_tracer("borg.stream"))
        producer = self.provider.get_tracer("borg.runtime")
        monkeypatch.setattr(stream_trace, "producer_tracer", producer)
        monkeypatch.setattr(trace_fastpath, "_direct_producer", None)
        self.sdk_spans = 0
        real = producer.start_span

        def counted(*args: Any, **kwargs: Any) -> Span:
            self.sdk_spans += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(producer, "start_span", counted)

    def run(self, publish: Any, headers: Any, fail: bool = False) -> tuple[Any, list[tuple[Any, ...]]]:
        """A stage span for ``headers`` and, inside it, one output's producer span."""
        self.ids.reset()
        self.exporter.clear()
        out: Any
        with stream_trace.stage_span("features window", headers, topic="p-nodestate.v1", group="g") as ctx:
            try:
                out = publish(ctx, fail)
            except RuntimeError as exc:
                out = repr(exc)
        return out, [_view(s) for s in self.exporter.get_finished_spans()]


def _view(span: ReadableSpan) -> tuple[Any, ...]:
    parent = span.parent
    # the stack trace names the function that raised: the same but for the oracle's own frame
    events = [(e.name, {k: v if k != "exception.stacktrace" else str(v).startswith("Traceback")
                        for k, v in (e.attributes or {}).items()}) for e in span.events]
    return (span.name, span.kind, span.context, None if parent is None else (parent.trace_id, parent.span_id,
            parent.is_remote, int(parent.trace_flags)), dict(span.attributes or {}), span.status.status_code,
            span.status.description, events, span.instrumentation_scope, span.resource,
            span.start_time is not None and span.end_time is not None and span.start_time <= span.end_time)


@pytest.fixture
def setup(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Setup]:
    s = _Setup(monkeypatch, ParentBased(TraceIdRatioBased(0.5)))
    yield s
    s.provider.shutdown()


def test_producer_span_is_the_stage_spans_child_and_the_header_names_it(setup: _Setup) -> None:
    out, _ = setup.run(new_publish, [("traceparent", TP)])
    stage, producer = sorted(setup.exporter.get_finished_spans(), key=lambda s: s.kind is SpanKind.PRODUCER)
    assert producer.kind is SpanKind.PRODUCER and producer.name == "features.v1 publish"
    assert dict(producer.attributes or {}) == {
        names.MESSAGING_SYSTEM: "kafka", names.MESSAGING_OPERATION: "send", names.MESSAGING_OPERATION_NAME: "send",
        names.MESSAGING_DESTINATION: "p-features.v1"}
    assert producer.parent is not None and not producer.parent.is_remote
    assert (producer.parent.trace_id, producer.parent.span_id) == (stage.context.trace_id, stage.context.span_id)
    # the next hop continues from the producer span, not from the stage span
    nxt = hdr.remote_parent(out)
    assert nxt is not None and (nxt.trace_id, nxt.span_id) == (producer.context.trace_id, producer.context.span_id)
    assert setup.sdk_spans == 0  # made on the direct path


@pytest.mark.parametrize("seed", [1, 2])
def test_publish_span_matches_the_old_sink_span_for_span(setup: _Setup, seed: int) -> None:
    """Sampled, unsampled, malformed and missing parents; a failing send; both paths give the same."""
    rng = random.Random(seed)
    direct_sampled = 0
    for i in range(150):
        headers = [("traceparent", random_traceparent(rng))] if i % 5 else None
        fail = i % 17 == 0
        before = setup.sdk_spans
        new = setup.run(new_publish, headers, fail)
        direct = setup.sdk_spans == before
        old = setup.run(old_publish, headers, fail)
        assert new == old, headers
        direct_sampled += direct and any(v[1] is SpanKind.PRODUCER for v in new[1])
    assert direct_sampled > 20


def test_a_failed_send_is_recorded_as_the_sdk_records_it(setup: _Setup) -> None:
    out, spans = setup.run(new_publish, [("traceparent", TP)], fail=True)
    assert out == "RuntimeError('broker gone')"
    (producer,) = [s for s in setup.exporter.get_finished_spans() if s.kind is SpanKind.PRODUCER]
    assert producer.status.status_code is trace.StatusCode.ERROR
    assert producer.status.description == "RuntimeError: broker gone"
    (event,) = producer.events
    assert event.name == "exception" and (event.attributes or {})["exception.type"] == "RuntimeError"
    assert setup.run(old_publish, [("traceparent", TP)], fail=True) == (out, spans)


def test_unsampled_parent_costs_a_span_id(setup: _Setup) -> None:
    unsampled = TP[:-2] + b"00"
    before = setup.sdk_spans
    out, spans = setup.run(new_publish, [("traceparent", unsampled)])
    assert spans == [] and setup.sdk_spans == before
    nxt = hdr.remote_parent(out)
    assert nxt is not None and nxt.trace_id == 0x0AF7651916CD43DD8448EB211C80319C and not nxt.trace_flags.sampled
    assert setup.run(old_publish, [("traceparent", unsampled)]) == (out, spans)


def test_without_a_context_the_current_span_is_the_parent(setup: _Setup) -> None:
    """``Sink.send(..., None)`` (a dead letter, drift's report) under a current span: its child, as before."""
    results = []
    for publish in (new_publish, old_publish):
        setup.ids.reset()
        setup.exporter.clear()
        with stream_trace.producer_tracer.start_as_current_span("outer"):
            out = publish(None)
        results.append((out, [_view(s) for s in setup.exporter.get_finished_spans()]))
    assert results[0] == results[1]
    outer, producer = sorted(setup.exporter.get_finished_spans(), key=lambda s: s.kind is SpanKind.PRODUCER)
    assert producer.parent is not None and producer.parent.span_id == outer.context.span_id


def test_another_sampler_goes_through_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _Setup(monkeypatch, ALWAYS_ON)  # not parent-based: only the SDK knows what it decides
    out, spans = s.run(new_publish, [("traceparent", TP)])
    assert s.sdk_spans == 1 and len(spans) == 2
    assert s.run(old_publish, [("traceparent", TP)]) == (out, spans)
    s.provider.shutdown()
