"""Per-call cost of each hand-written fast path against the library path it stands in for.

``python -m loadtests.bench_fastpaths [--quick]`` prints one line per fast path: µs per call
(the best of 60 rounds of 1,000 calls; 20 of 200 with ``--quick``)
on its fast path, on the library path (the same module with its guard switched off, or
``Tracer.start_span`` for spans), and the ratio. Inputs are simulator NodeState messages
(~2.4 kB JSON) and FeatureVectors of the features service's shape (157 values); spans are made on a provider set up
as ``services.runtime.telemetry`` does (parent-based ratio 1.0 sampler, a batch processor)
with an exporter that drops everything, so the figures are the per-message CPU cost in the
stage, not the export. The numbers move with the machine: compare the two columns of one
run, and see ``docs/performance.md`` for recorded figures.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import orjson
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

import contracts.fast.featurevector as fast_fv
import contracts.fast.nodestate as fast_ns
import contracts.fast.traceparent as fast_tp
from contracts import FeatureVector, NodeState, decode
from contracts import headers as hdr
from contracts.topics import Topic
from services.runtime import stream_trace, trace_fastpath

TP_SAMPLED = [("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")]
TS = 1_764_000_000_000
FEATURES = 157
TP_UNSAMPLED = [("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")]


class _Drop(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _per_call_us(fn: Callable[[], object], calls: int, rounds: int) -> float:
    fn()
    best = float("inf")
    for _ in range(rounds):  # the best round: the least disturbed by other load
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, time.perf_counter() - started)
    return best / calls * 1e6


@contextmanager
def _off(module: Any) -> Iterator[None]:
    saved = module.ACTIVE
    module.ACTIVE = False
    try:
        yield
    finally:
        module.ACTIVE = saved


@contextmanager
def _sdk_spans() -> Iterator[None]:
    saved = trace_fastpath._direct_ok
    trace_fastpath._direct_ok = False
    try:
        yield
    finally:
        trace_fastpath._direct_ok = saved


def _messages() -> tuple[list[bytes], list[bytes]]:
    """Simulator NodeState values, and FeatureVectors of the features service's shape (157 values)."""
    import random

    from simulator import SyntheticCluster

    states = [d for batch in SyntheticCluster(nodes=20, seed=1).run(30) for d in batch.nodestate_dicts(ts_ms=TS)]
    rng = random.Random(1)
    vectors = []
    for i in range(50):
        values = [rng.random() * 10 ** rng.randrange(-3, 6) for _ in range(FEATURES)]
        vector = FeatureVector(node=f"n{i}", ts_ms=TS, window_s=10, schema_hash="0123456789abcdef", values=values,
                               valid=[rng.random() < 0.9 for _ in range(FEATURES)], samples=10, input_ts_ms=TS)
        vectors.append(orjson.dumps(vector.model_dump(mode="json")))
    return [orjson.dumps(s) for s in states], vectors


def rows(quick: bool) -> list[tuple[str, float, float]]:
    calls, rounds = (200, 20) if quick else (1_000, 60)
    states, vectors = _messages()
    ns, fv = states[len(states) // 2], vectors[len(vectors) // 2]
    out: list[tuple[str, float, float]] = []

    def pair(name: str, fast: Callable[[], object], off: Any) -> None:
        fast_us = _per_call_us(fast, calls, rounds)
        with off:
            slow_us = _per_call_us(fast, calls, rounds)
        out.append((name, fast_us, slow_us))

    pair("NodeState decode (features)", lambda: fast_ns.decode_nodestate_dict(ns), _off(fast_ns))
    out.append(("  (pydantic decode + model_dump)", out[-1][1],
                _per_call_us(lambda: decode(NodeState, ns).model_dump(), calls, rounds)))
    pair("FeatureVector decode to a row", lambda: fast_fv.decode_feature_row(fv), _off(fast_fv))
    fields = decode(FeatureVector, fv).model_dump()
    build = fast_fv.assembler(FeatureVector)
    out.append(("FeatureVector assembler", _per_call_us(lambda: build(dict(fields)), calls, rounds),
                _per_call_us(lambda: FeatureVector.model_validate(dict(fields)), calls, rounds)))
    pair("traceparent extract", lambda: hdr.extract_trace(TP_SAMPLED), _off(fast_tp))
    ctx = hdr.extract_trace(TP_SAMPLED)
    pair("headers build", lambda: hdr.build_headers(Topic.FEATURES, ctx), _off(fast_tp))

    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(1.0)), shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(_Drop(), max_queue_size=1 << 20))
    saved = stream_trace.tracer, stream_trace.producer_tracer
    stream_trace.tracer = provider.get_tracer("borg.stream")
    stream_trace.producer_tracer = provider.get_tracer("borg.runtime")
    publish = stream_trace.Publish(Topic.FEATURES, Topic.FEATURES)

    def stage(headers: list[tuple[str, bytes]]) -> Callable[[], object]:
        def run() -> object:
            with stream_trace.stage_span("features window", headers, topic=Topic.NODESTATE, group="g",
                                         attributes={"borg.node.name": "n1"}) as c:
                return hdr.build_headers(Topic.FEATURES, c)
        return run

    def stage_and_publish(headers: list[tuple[str, bytes]]) -> Callable[[], object]:
        def run() -> object:
            with stream_trace.stage_span("features window", headers, topic=Topic.NODESTATE, group="g",
                                         attributes={"borg.node.name": "n1"}) as c, \
                    stream_trace.publish_span(publish, c) as out_ctx:
                return hdr.build_headers(Topic.FEATURES, out_ctx)
        return run

    try:
        pair("stage span + headers, sampled", stage(TP_SAMPLED), _sdk_spans())
        pair("stage + producer span + headers, sampled", stage_and_publish(TP_SAMPLED), _sdk_spans())
        pair("stage span + headers, unsampled", stage(TP_UNSAMPLED), _sdk_spans())
        pair("stage + producer span + headers, unsampled", stage_and_publish(TP_UNSAMPLED), _sdk_spans())
    finally:
        stream_trace.tracer, stream_trace.producer_tracer = saved
        provider.shutdown()
    return out


def main(argv: list[str]) -> None:
    print(f"{'fast path':45} {'fast µs':>8} {'library µs':>11} {'ratio':>6}")
    for name, fast_us, slow_us in rows("--quick" in argv):
        print(f"{name:45} {fast_us:8.2f} {slow_us:11.2f} {slow_us / fast_us:6.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
