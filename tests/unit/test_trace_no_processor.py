"""Spans nobody can see are not built: a provider without span processors (no OTLP endpoint) still gets
every output's trace context, ids drawn as before, and a processor added later sees every span again."""

from __future__ import annotations

import asyncio

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


class _Batch:
    def __init__(self, out: list[list[tuple[str, bytes]]]) -> None:
        self.out = out

    def append(self, *, key: bytes, value: bytes, timestamp: object, headers: list[tuple[str, bytes]]) -> object:
        self.out.append(list(headers))
        return object()


class _Producer:
    """What ``Sink`` asks of its producer to build an output (nothing is sent)."""

    def __init__(self) -> None:
        self.headers: list[list[tuple[str, bytes]]] = []

    def create_batch(self) -> _Batch:
        return _Batch(self.headers)

    async def partitions_for(self, topic: str) -> set[int]:
        return {0, 1}


def _sink_outputs(fused: bool) -> list[list[tuple[str, bytes]]]:
    """Headers of one output per input (a traced one, an unsampled one, an untraced one, one with tracestate)
    through ``stage_span`` + ``send_encoded``, or through ``quiet_stage`` + ``send_quiet`` where it answers."""
    from services.runtime.stream_io import Sink

    inputs: list[list[tuple[str, bytes]]] = [[("traceparent", TP)], [("traceparent", TP[:-2] + b"00")], [],
                                             [("traceparent", TP), ("tracestate", b"k=v")]]

    async def run() -> list[list[tuple[str, bytes]]]:
        sink = Sink(bootstrap="127.0.0.1:1", service="t", topic_prefix="p-")
        producer = _Producer()
        sink._producer = producer  # type: ignore[assignment]
        for headers in inputs:
            stage = stream_trace.quiet_stage(headers) if fused else None
            if stage is not None:
                await sink.send_quiet("regimes.v2", "node-a", b"{}", stage, extra_headers=[("x", b"1")])
            else:
                with stream_trace.stage_span("regime infer", headers, topic="p-features.v1", group="g",
                                             attributes={"k": "v"}) as ctx:
                    await sink.send_encoded("regimes.v2", "node-a", b"{}", ctx, extra_headers=[("x", b"1")])
        return producer.headers

    return asyncio.run(run())


def test_fused_stage_and_producer_step_writes_the_same_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    """``quiet_stage`` + ``Sink.send_quiet`` (no span processor) draws the ids ``stage_span`` + ``send_encoded``
    draws, in the same order: the same header bytes; with a processor it declines and every span is made."""
    ids = _CountingIds()
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(1.0)), id_generator=ids)
    monkeypatch.setattr(stream_trace, "tracer", provider.get_tracer("borg.stream"))
    monkeypatch.setattr(stream_trace, "producer_tracer", provider.get_tracer("borg.runtime"))
    _sink_outputs(False)  # the direct path's one-time self-check
    ids.reset()
    plain = _sink_outputs(False)
    ids.reset()
    fused = _sink_outputs(True)
    assert fused == plain
    assert dict(fused[0])["traceparent"] == b"00-0af7651916cd43dd8448eb211c80319c-%016x-01" % 0x1002
    assert dict(fused[1])["traceparent"].endswith(b"-00") and dict(fused[3])["tracestate"] == b"k=v"
    assert all(h[-1] == ("x", b"1") for h in fused)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ids.reset()
    assert stream_trace.quiet_stage([("traceparent", TP)]) is None
    assert _sink_outputs(True) == plain
    # sampled inputs: the traced one, the new root, the one with tracestate; a stage and a producer span each
    assert len(exporter.get_finished_spans()) == 6
    provider.shutdown()
