"""Spans nobody can see are not built: a provider without span processors (no OTLP endpoint) still gets
every output's trace context, ids drawn as before, and a processor added later sees every span again."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from contracts import headers as hdr
from services.runtime import stream_trace
from services.runtime import trace_fastpath as fast
from tests.unit.test_trace_fastpath import TP, _CountingIds


def _headers_of_one_output() -> tuple[bytes, ...]:
    """The traceparents of an output of a traced input and of an untraced one (a new root)."""
    publish = stream_trace.Publish("regimes.v2", "p-regimes.v2")
    out = []
    for headers in ([("traceparent", TP)], []):
        with stream_trace.stage_span("regime infer", headers, topic="p-features.v1", group="g",
                                     attributes={"k": "v"}) as ctx, stream_trace.publish_span(publish, ctx) as sent:
            out.append(dict(hdr.build_headers("regimes.v2", sent))["traceparent"])
    return tuple(out)


def test_no_processor_same_headers_no_spans_then_spans_again(monkeypatch: pytest.MonkeyPatch) -> None:
    ids = _CountingIds()
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(1.0)), id_generator=ids)
    monkeypatch.setattr(stream_trace, "tracer", provider.get_tracer("borg.stream"))
    monkeypatch.setattr(stream_trace, "producer_tracer", provider.get_tracer("borg.runtime"))
    _headers_of_one_output()  # the direct path's one-time self-check makes spans of its own
    ids.reset()
    built: list[object] = []
    real = fast.DirectSpan

    def counted(*args: object, **kw: object) -> fast.DirectSpan:
        span = real(*args, **kw)  # type: ignore[arg-type]
        built.append(span)
        return span

    monkeypatch.setattr(fast, "DirectSpan", counted)
    quiet = _headers_of_one_output()
    assert built == []  # no processor: no span object, no ReadableSpan
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ids.reset()
    seen = _headers_of_one_output()
    # the same ids in the same order: the outputs' headers are byte for byte what they were
    assert seen == quiet
    assert seen[0] == b"00-0af7651916cd43dd8448eb211c80319c-%016x-01" % 0x1002
    assert len(built) == 4 and len(exporter.get_finished_spans()) == 4
    provider.shutdown()
