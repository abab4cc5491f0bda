"""The per-message trace fast paths are exact: same contexts, same header bytes, same spans.

``extract_trace`` and ``build_headers`` parse and format ``traceparent`` themselves in the
common case, and ``stage_span`` is a small class instead of a generator. The oracles below
are verbatim copies of the implementations they replaced (OpenTelemetry's global propagator
and TraceContextTextMapPropagator.inject behind them); every generated case must give the
same result as the oracle, down to the exception raised for malformed input.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.propagate import get_global_textmap, set_global_textmap
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from contracts import headers as hdr
from contracts import telemetry as names
from contracts.fast.traceparent import TRACEPARENT_00
from services.runtime import stream_trace

# ------------------------------------------------------------------ oracles (the old code)

_OLD_W3C = TraceContextTextMapPropagator()


def old_extract_trace(headers: Iterable[tuple[str, bytes]] | None) -> otel_context.Context:
    carrier: dict[str, str] = {}
    for key, value in headers or ():
        if key in ("traceparent", "tracestate") and value is not None:
            carrier[key] = value.decode("ascii", errors="replace")
    return get_global_textmap().extract(carrier) if carrier else otel_context.Context()


def old_build_headers(schema: str, ctx: otel_context.Context | None = None) -> list[tuple[str, bytes]]:
    carrier: dict[str, str] = {}
    _OLD_W3C.inject(carrier, context=ctx)
    out: list[tuple[str, bytes]] = [("content-type", b"application/json"), ("schema", schema.encode())]
    out.extend((k, v.encode("ascii")) for k, v in carrier.items())
    return out


@contextmanager
def old_stage_span(
    span_name: str,
    headers: Sequence[tuple[str, bytes]] | None,
    *,
    topic: str,
    group: str,
    attributes: Mapping[str, AttributeValue] | None = None,
    links: Sequence[Link] = (),
) -> Iterator[otel_context.Context]:
    parent = old_extract_trace(headers)
    attrs: dict[str, AttributeValue] = {
        names.MESSAGING_SYSTEM: "kafka",
        names.MESSAGING_OPERATION: "process",
        names.MESSAGING_DESTINATION: topic,
        names.MESSAGING_CONSUMER_GROUP: group,
    }
    attrs.update(attributes or {})
    span = stream_trace.tracer.start_span(span_name, context=parent, kind=SpanKind.CONSUMER, attributes=attrs,
                                          links=list(links))
    try:
        yield trace.set_span_in_context(span, parent)
    finally:
        span.end()


# ------------------------------------------------------------------ comparison helpers


def context_view(ctx: otel_context.Context) -> tuple[Any, ...]:
    """Everything observable about an extracted context."""
    span = trace.get_current_span(ctx)
    sc = span.get_span_context()
    return (
        type(span).__name__,
        span is trace.INVALID_SPAN,
        sorted(ctx.keys()),
        sc.trace_id,
        sc.span_id,
        int(sc.trace_flags),
        type(sc.trace_flags).__name__,
        sc.is_remote,
        sc.is_valid,
        list(sc.trace_state.items()),
        sc.trace_state.to_header(),
    )


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except Exception as exc:  # parity includes the failure mode
        return "raised", type(exc).__name__


def extract_outcome(fn: Any, headers: Any) -> tuple[str, Any]:
    kind, value = outcome(fn, headers)
    return (kind, context_view(value)) if kind == "ok" else (kind, value)


def copy_headers(headers: Any) -> Any:
    """A fresh container of the same shape (generators are one-shot)."""
    if isinstance(headers, _Gen):
        return _Gen(headers.items)
    if isinstance(headers, (list, dict)):
        return type(headers)(headers)
    return headers


class _Gen:
    """A one-shot iterable of header pairs, as a generator-shaped caller would pass."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __iter__(self) -> Iterator[Any]:
        return (item for item in self.items)

    def __repr__(self) -> str:
        return f"_Gen({self.items!r})"


# ------------------------------------------------------------------ generated header sets

HEX = "0123456789abcdef"


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(HEX) for _ in range(n))


def random_traceparent(rng: random.Random) -> bytes:
    if rng.random() < 0.6:  # the common shape: what producers actually send
        flags = rng.choice(["00", "01", "01", "03", f"{rng.randrange(256):02x}"])
        return f"00-{_hex(rng, 32)}-{_hex(rng, 16)}-{flags}".encode()
    version = rng.choice(["00"] * 8 + ["01", "ff", "fe", "FF", "0g", "0", "000", "cc"])
    trace_id = rng.choice([_hex(rng, 32)] * 6 + [
        "0" * 32, _hex(rng, 32).upper(), _hex(rng, 31), _hex(rng, 33), _hex(rng, 31) + "g",
        "0" * 31 + "1", "f" * 32, _hex(rng, 16) + "_" + _hex(rng, 15), " " + _hex(rng, 31)])
    span_id = rng.choice([_hex(rng, 16)] * 6 + [
        "0" * 16, _hex(rng, 16).upper(), _hex(rng, 15), _hex(rng, 17), "0" * 15 + "1", "f" * 16,
        "+" + _hex(rng, 15), _hex(rng, 8) + "_" + _hex(rng, 7)])
    flags = rng.choice(["00", "01"] * 4 + [f"{rng.randrange(256):02x}", "03", "ff", "FF", "1", "001", "0x", "-1"])
    sep = rng.choice(["-"] * 12 + ["_", "--", ":"])
    prefix = rng.choice([""] * 10 + [" ", "\t", " \t", "x"])
    suffix = rng.choice([""] * 10 + [" ", "\t", "\n", "-", "-extra", "-00", " x", "\r"])
    text = prefix + version + sep + trace_id + sep + span_id + sep + flags + suffix
    raw = text.encode("ascii")
    roll = rng.random()
    if roll < 0.03:  # bytes that are not ASCII
        at = rng.randrange(len(raw) + 1)
        raw = raw[:at] + rng.choice([b"\xff", b"\x80", "é".encode(), b"\x00"]) + raw[at + 1:]
    elif roll < 0.05:
        raw = raw + b"-" + b"a" * rng.choice([10, 470, 600])  # near/over the 512 limit
    elif roll < 0.07:
        raw = rng.choice([b"", b"garbage", b"00", b"-" * 55, bytes(rng.randrange(256) for _ in range(55))])
    return raw


def random_tracestate(rng: random.Random) -> bytes:
    return rng.choice([
        b"rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
        b"vendor=value",
        b"",
        b"bad key=v",
        b"a=1,a=2",
        b"k=" + b"v" * 600,
        ",".join(f"k{i}=v{i}" for i in range(40)).encode(),
        b"\xff=x",
    ])


def random_headers(rng: random.Random) -> Any:
    items: list[Any] = []
    if rng.random() < 0.7:
        items.append(("content-type", b"application/json"))
    if rng.random() < 0.7:
        items.append(("schema", b"features.v1"))
    for _ in range(rng.choice([1] * 8 + [0, 2, 3])):
        value: Any = random_traceparent(rng)
        roll = rng.random()
        if roll < 0.05:
            value = None
        elif roll < 0.07:
            value = value.decode("ascii", errors="replace")  # a str value: the old code raised
        elif roll < 0.09:
            value = bytearray(value)
        elif roll < 0.10:
            value = memoryview(value)
        items.append((rng.choice(["traceparent"] * 12 + ["Traceparent", "TRACEPARENT"]), value))
    for _ in range(rng.choice([0] * 6 + [1, 1, 2])):
        items.append(("tracestate", None if rng.random() < 0.1 else random_tracestate(rng)))
    if rng.random() < 0.05:
        items.append(("baggage", b"k=v"))
    rng.shuffle(items)
    shape = rng.random()
    if shape < 0.08:
        return tuple(items)
    if shape < 0.14:
        return _Gen(items)
    if shape < 0.16:
        return dict(items)  # dict-shaped headers: iterated by key, as before
    if shape < 0.17:
        return None
    if shape < 0.18:
        return []
    if shape < 0.19:
        return [("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), ("broken",)]
    return items


SEEDS = range(4)
CASES_PER_SEED = 1500


@pytest.fixture
def textmap() -> Iterator[None]:
    """Restores the global propagator a test replaces."""
    saved = get_global_textmap()
    yield
    set_global_textmap(saved)


def _assert_extract_parity(rng: random.Random, n: int) -> dict[str, int]:
    seen = {"ok": 0, "raised": 0, "valid": 0}
    for _ in range(n):
        hdrs = random_headers(rng)
        expected = extract_outcome(old_extract_trace, copy_headers(hdrs))
        actual = extract_outcome(hdr.extract_trace, copy_headers(hdrs))
        assert actual == expected, hdrs
        seen[expected[0]] += 1
        if expected[0] == "ok" and expected[1][8]:
            seen["valid"] += 1
    return seen


@pytest.mark.parametrize("seed", SEEDS)
def test_extract_matches_the_global_propagator_on_generated_headers(seed: int) -> None:
    seen = _assert_extract_parity(random.Random(seed), CASES_PER_SEED)
    # the generator really covers valid parents, invalid input and malformed input
    assert seen["valid"] > CASES_PER_SEED // 3
    assert seen["ok"] - seen["valid"] > 50
    assert seen["raised"] > 10


@pytest.mark.parametrize("seed", SEEDS)
def test_remote_parent_is_the_span_context_extract_gives(seed: int) -> None:
    """``remote_parent`` (stage_span's shortcut) answers only where it is exact, else None."""
    rng = random.Random(seed)
    answered = 0
    for _ in range(CASES_PER_SEED):
        hdrs = random_headers(rng)
        try:
            expected = old_extract_trace(copy_headers(hdrs))
        except Exception as exc:  # the shortcut fails the same way, or declines (extract_trace then fails)
            try:
                declined = hdr.remote_parent(copy_headers(hdrs))  # type: ignore[arg-type]
            except Exception as same:
                assert type(same) is type(exc), hdrs
            else:
                assert declined is None, hdrs
            continue
        got = hdr.remote_parent(copy_headers(hdrs))  # type: ignore[arg-type]
        if got is None:
            continue
        answered += 1
        parent = trace.get_current_span(expected).get_span_context()
        assert got == parent and got.is_valid and got.is_remote, hdrs
        assert tuple(got) == tuple(parent)  # every field, is_valid and trace_state included
        # the context built from it holds what the extracted one holds (spans compare by identity)
        built, extracted = hdr.span_context_in(got), hdr.extract_trace(copy_headers(hdrs))
        assert list(built) == list(extracted), hdrs
        assert all(type(built[k]) is type(extracted[k]) for k in built)
        assert trace.get_current_span(built).get_span_context() == parent
    assert answered > CASES_PER_SEED // 4


def test_remote_parent_declines_what_only_extract_may_read() -> None:
    tp = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert hdr.remote_parent([("traceparent", tp)]) is not None
    for declined in (None, [], [("schema", b"x")], iter([("traceparent", tp)]), {"traceparent": tp},
                     [("traceparent", tp), ("tracestate", b"a=b")], [("traceparent", tp.upper())],
                     [("traceparent", b"00-" + b"0" * 32 + tp[35:])], [("traceparent", tp.decode())]):
        assert hdr.remote_parent(declined) is None, declined  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "raw",
    [
        b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03",
        b"00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",
        b"00-00000000000000000000000000000000-b7ad6b7169203331-01",
        b"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        b"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        b"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-future",
        b"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
        b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n",
        b" \t00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 \t",
        b"00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",
        b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",
        b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1",
        b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0g",
        b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333\xff-01",
        b"00-0af7651916cd43dd_448eb211c80319c-b7ad6b7169203331-01",
        b"",
        b"garbage",
    ],
)
def test_extract_edge_cases_match(raw: bytes) -> None:
    for hdrs in ([("traceparent", raw)],
                 [("traceparent", raw), ("tracestate", b"rojo=00f067aa0ba902b7")],
                 [("traceparent", b"00-11111111111111111111111111111111-2222222222222222-01"), ("traceparent", raw)],
                 [("traceparent", raw), ("traceparent", None)],
                 [("tracestate", raw)],
                 [("traceparent", raw), ("traceparent", b"00-11111111111111111111111111111111-2222222222222222-01")]):
        assert extract_outcome(hdr.extract_trace, hdrs) == extract_outcome(old_extract_trace, hdrs), hdrs


def test_every_flag_byte_is_kept() -> None:
    for flags in range(256):
        hdrs = [("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-%02x" % flags)]
        new = trace.get_current_span(hdr.extract_trace(hdrs)).get_span_context()
        assert context_view(hdr.extract_trace(hdrs)) == context_view(old_extract_trace(hdrs))
        assert int(new.trace_flags) == flags and new.trace_flags.sampled == bool(flags & 1)


def test_valid_parent_is_remote_and_carries_tracestate() -> None:
    ctx = hdr.extract_trace([("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
                           ("tracestate", b"rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")])
    sc = trace.get_current_span(ctx).get_span_context()
    assert (sc.trace_id, sc.span_id) == (0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331)
    assert sc.is_remote and sc.trace_flags.sampled
    assert sc.trace_state == TraceState([("rojo", "00f067aa0ba902b7"), ("congo", "t61rcWkgMzE")])


def test_fast_path_is_taken_only_when_it_may_be(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real_extract = TraceContextTextMapPropagator.extract

    def counting(self: TraceContextTextMapPropagator, *args: Any, **kwargs: Any) -> otel_context.Context:
        calls.append(args[0])
        return real_extract(self, *args, **kwargs)

    monkeypatch.setattr(TraceContextTextMapPropagator, "extract", counting)
    plain = [("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")]
    assert trace.get_current_span(hdr.extract_trace(plain)).get_span_context().is_valid
    assert calls == []  # parsed here, not by the propagator
    hdr.extract_trace([*plain, ("tracestate", b"a=b")])
    hdr.extract_trace([("traceparent", b"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")])
    hdr.extract_trace([("traceparent", b"00-00000000000000000000000000000000-b7ad6b7169203331-01")])
    assert len(calls) == 3  # tracestate, another version, all-zero id: the propagator decides


def test_other_propagators_are_still_used(textmap: None) -> None:
    """The fast path only stands in for W3C trace context; any other set-up is asked."""

    class Stamp(TextMapPropagator):
        def extract(self, carrier: Any, context: otel_context.Context | None = None, getter: Any = None,
                    ) -> otel_context.Context:
            return otel_context.set_value("stamped", dict(carrier), context)

        def inject(self, carrier: Any, context: otel_context.Context | None = None, setter: Any = None) -> None:
            return None

        @property
        def fields(self) -> set[str]:
            return set()

    plain = [("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")]
    others: list[TextMapPropagator] = [
        Stamp(), CompositePropagator([TraceContextTextMapPropagator(), Stamp()]),
        CompositePropagator([W3CBaggagePropagator(), TraceContextTextMapPropagator()])]
    for propagator in others:
        set_global_textmap(propagator)
        token = otel_context.attach(otel_context.set_value("ambient", 1))
        try:
            new, old = hdr.extract_trace(plain), old_extract_trace(plain)
        finally:
            otel_context.detach(token)
        assert context_view(new) == context_view(old)
        assert dict(new).keys() == dict(old).keys()
        assert new.get("stamped") == old.get("stamped") and new.get("ambient") == old.get("ambient")
    # baggage first reads the ambient context: the fast path must not have hidden it
    assert new.get("ambient") == 1
    w3c: list[TextMapPropagator] = [
        TraceContextTextMapPropagator(),
        CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])]
    for propagator in w3c:
        set_global_textmap(propagator)
        assert _assert_extract_parity(random.Random(7), 300)["valid"] > 50


# ------------------------------------------------------------------ build_headers


def _contexts(rng: random.Random, n: int) -> Iterator[otel_context.Context | None]:
    yield None
    yield otel_context.Context()
    yield otel_context.set_value("unrelated", 1)
    specials = [
        SpanContext(0, 0, is_remote=True),  # not INVALID_SPAN_CONTEXT: the propagator writes zeros
        SpanContext(0, 0, is_remote=False),
        SpanContext(1, 0, is_remote=False),
        SpanContext(0, 1, is_remote=False),
        SpanContext(2**128 - 1, 2**64 - 1, is_remote=False, trace_flags=TraceFlags(0xFF)),
        SpanContext(2**128, 5, is_remote=False),  # out of range: not valid, still written
        SpanContext(5, 6, is_remote=False, trace_flags=TraceFlags(1), trace_state=TraceState([("a", "b")])),
        SpanContext(5, 6, is_remote=True, trace_flags=TraceFlags(3), trace_state=TraceState()),
        SpanContext(5, 6, is_remote=True, trace_flags=None, trace_state=None),
        SpanContext(5, 6, is_remote=True, trace_flags=1, trace_state=None),  # type: ignore[arg-type]
    ]
    for sc in specials:
        yield trace.set_span_in_context(trace.NonRecordingSpan(sc))
    for _ in range(n):
        yield _safe_extract(random_headers(rng) if rng.random() < 0.3 else [
            ("traceparent", random_traceparent(rng)),
            *([("tracestate", random_tracestate(rng))] if rng.random() < 0.2 else [])])
        sc = SpanContext(rng.getrandbits(128) or 1, rng.getrandbits(64) or 1, is_remote=rng.random() < 0.5,
                         trace_flags=TraceFlags(rng.randrange(256)))
        yield trace.set_span_in_context(trace.NonRecordingSpan(sc))


def _safe_extract(headers: Any) -> otel_context.Context:
    try:
        return old_extract_trace(headers)
    except Exception:  # malformed header sets are covered by the extract tests
        return otel_context.Context()


def test_build_headers_matches_the_propagator_byte_for_byte() -> None:
    rng = random.Random(11)
    schemas = ["nodestate.v1", "features.v1", "regimes.v2", "", "schéma.v1", "risk.v2"]
    traced = 0
    for i, ctx in enumerate(_contexts(rng, 1500)):
        schema = schemas[i % len(schemas)]
        new, old = hdr.build_headers(schema, ctx), old_build_headers(schema, ctx)
        assert new == old, ctx
        assert [type(v) for _, v in new] == [bytes] * len(new)
        traced += len(new) > 2
    assert traced > 1000


def test_build_headers_with_the_current_span_and_without_any() -> None:
    tracer = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.5))).get_tracer("test")
    assert hdr.build_headers("x") == old_build_headers("x") == [("content-type", b"application/json"),
                                                            ("schema", b"x")]
    for i in range(200):  # sampled and unsampled roots
        with tracer.start_as_current_span(f"s{i}") as span:
            assert hdr.build_headers("nodestate.v1") == old_build_headers("nodestate.v1")
            sc = span.get_span_context()
            want = f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{sc.trace_flags:02x}".encode()
            assert hdr.build_headers("nodestate.v1")[2] == ("traceparent", want)


def test_build_headers_returns_a_fresh_list_and_fails_like_before() -> None:
    first = hdr.build_headers("features.v1")
    first.append(("extra", b"1"))
    assert hdr.build_headers("features.v1") == [("content-type", b"application/json"), ("schema", b"features.v1")]
    for bad in (None, b"bytes", 3):
        assert outcome(hdr.build_headers, bad) == outcome(old_build_headers, bad)
        assert outcome(hdr.build_headers, bad)[0] == "raised"


# ------------------------------------------------------------------ stage_span


class _CountingIds(IdGenerator):
    """Deterministic ids so the old and the new stage_span can be compared span for span."""

    def __init__(self) -> None:
        self.n = 0

    def generate_span_id(self) -> int:
        self.n += 1
        return 0x1000 + self.n

    def generate_trace_id(self) -> int:
        self.n += 1
        return 0xABC0000 + self.n

    def reset(self) -> None:
        self.n = 0


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[InMemorySpanExporter, _CountingIds]]:
    """stage_span on a private provider configured like production (ParentBased ratio sampler)."""
    ids = _CountingIds()
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(1.0)), id_generator=ids)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(stream_trace, "tracer", provider.get_tracer("borg.stream"))
    yield exporter, ids
    provider.shutdown()


def _span_view(span: ReadableSpan) -> tuple[Any, ...]:
    assert span.end_time is not None
    parent = span.parent
    return (
        span.name,
        span.kind,
        span.context.trace_id,
        span.context.span_id,
        int(span.context.trace_flags),
        span.context.trace_state.to_header(),
        None if parent is None else (parent.trace_id, parent.span_id, parent.is_remote, int(parent.trace_flags)),
        list((span.attributes or {}).items()),
        [(link.context, dict(link.attributes or {})) for link in span.links],
        span.status.status_code,
        len(span.events),
        span.instrumentation_scope.name if span.instrumentation_scope else None,
    )


TP = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_stage_span_is_a_child_of_the_input_and_outputs_name_it(
        spans: tuple[InMemorySpanExporter, _CountingIds]) -> None:
    exporter, _ = spans
    attrs: dict[str, AttributeValue] = {names.NODE_NAME: "n1", names.MODEL_VERSION: "r1",
                                        names.REGIME_LABEL: "cpu_bound", names.REGIME_CONFIDENCE: 0.75}
    with stream_trace.stage_span("regime infer", [("schema", b"features.v1"), ("traceparent", TP)],
                                 topic="p-features.v1", group="regime", attributes=attrs) as ctx:
        out = hdr.build_headers("regimes.v2", ctx)
        assert exporter.get_finished_spans() == ()  # ended when the with ends
    (finished,) = exporter.get_finished_spans()
    assert finished.start_time is not None and finished.end_time is not None
    assert finished.start_time <= finished.end_time
    assert finished.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert finished.parent is not None and finished.parent.span_id == 0xB7AD6B7169203331 and finished.parent.is_remote
    assert finished.kind is SpanKind.CONSUMER
    assert dict(finished.attributes or {}) == {
        names.MESSAGING_SYSTEM: "kafka", names.MESSAGING_OPERATION: "process",
        names.MESSAGING_DESTINATION: "p-features.v1", names.MESSAGING_CONSUMER_GROUP: "regime", **attrs}
    sc = finished.context
    want = f"00-0af7651916cd43dd8448eb211c80319c-{sc.span_id:016x}-{sc.trace_flags:02x}"
    assert hdr.header(out, "traceparent") == want
    assert hdr.trace_id_of(out) == "0af7651916cd43dd8448eb211c80319c"
    # and the next stage continues from this span
    nxt = trace.get_current_span(hdr.extract_trace(out)).get_span_context()
    assert (nxt.trace_id, nxt.span_id) == (sc.trace_id, sc.span_id)


def test_unsampled_parent_gives_an_unrecorded_child_with_the_same_trace(
        spans: tuple[InMemorySpanExporter, _CountingIds]) -> None:
    exporter, _ = spans
    unsampled = TP[:-2] + b"00"
    with stream_trace.stage_span("x", [("traceparent", unsampled)], topic="t", group="g") as ctx:
        out = hdr.build_headers("y", ctx)
    span = trace.get_current_span(ctx)
    assert not span.is_recording() and exporter.get_finished_spans() == ()
    sc = span.get_span_context()
    assert sc.trace_id == 0x0AF7651916CD43DD8448EB211C80319C and sc.span_id != 0xB7AD6B7169203331
    assert hdr.header(out, "traceparent") == f"00-0af7651916cd43dd8448eb211c80319c-{sc.span_id:016x}-00"


def _run(stage: Any, headers: Any, attributes: Any, links: Any) -> list[tuple[str, bytes]]:
    with stage("risk infer", headers, topic="p-taskevents.v1", group="risk", attributes=attributes,
               links=links) as ctx:
        return hdr.build_headers("risk.v2", ctx)


def test_stage_span_matches_the_old_generator_span_for_span(
        spans: tuple[InMemorySpanExporter, _CountingIds]) -> None:
    exporter, ids = spans
    rng = random.Random(5)
    link = Link(SpanContext(0xAA, 0xBB, is_remote=True, trace_flags=TraceFlags(1)), {"why": "join"})
    compared = 0
    for i in range(300):
        headers = [("traceparent", random_traceparent(rng))]
        if rng.random() < 0.2:
            headers.append(("tracestate", random_tracestate(rng)))
        choices: list[Any] = [  # incl. a caller attribute overriding a messaging one, and an invalid value
            None, {}, {names.NODE_NAME: f"n{i}"},
            {names.TASK_ID: "t1", names.RISK_PROBABILITY: 0.25, names.MODEL_VERSION: "m", names.NODE_NAME: "n"},
            {names.MESSAGING_DESTINATION: "overridden", "list.value": ["a", "b"], "bad": None}]
        attributes: Any = rng.choice(choices)
        links: Any = rng.choice([(), [], [link], (link, link)])
        results = []
        for stage in (old_stage_span, stream_trace.stage_span):
            ids.reset()
            exporter.clear()
            out = _run(stage, headers, attributes, links)
            results.append((out, [_span_view(s) for s in exporter.get_finished_spans()]))
        assert results[0] == results[1], headers
        compared += bool(results[0][1])
    assert compared > 100


def _otlp_bytes(spans: Sequence[ReadableSpan]) -> bytes:
    """The spans as the OTLP exporters send them, with the (differing) start and end times zeroed."""
    request = encode_spans(spans)
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                assert 0 < span.start_time_unix_nano <= span.end_time_unix_nano
                span.start_time_unix_nano = span.end_time_unix_nano = 0
    return bytes(request.SerializeToString())


@pytest.mark.parametrize("processor", ["batch", "simple"])
def test_direct_spans_export_exactly_as_sdk_spans(processor: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = _CountingIds()
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(1.0)), id_generator=ids,
                              resource=Resource.create({"service.name": "regime"}))
    exporter = InMemorySpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter) if processor == "batch" else SimpleSpanProcessor(exporter))
    monkeypatch.setattr(stream_trace, "tracer", provider.get_tracer("borg.stream"))
    sdk_calls = _count_sdk_spans(monkeypatch)
    rng = random.Random(11)
    direct = 0
    for i in range(200):
        headers = [("schema", b"features.v1"), ("traceparent", random_traceparent(rng))]
        attributes: Any = rng.choice([None, {names.NODE_NAME: f"n{i}"},
                                      {names.NODE_NAME: "n", names.REGIME_LABEL: "llc", names.REGIME_CONFIDENCE: 0.5,
                                       names.MODEL_VERSION: "v", "flag": True, "count": 3}])
        encoded = []
        for stage in (old_stage_span, stream_trace.stage_span):
            ids.reset()
            exporter.clear()
            before = sdk_calls[0]
            out = _run(stage, headers, attributes, ())
            direct += stage is stream_trace.stage_span and sdk_calls[0] == before
            provider.force_flush()
            finished = exporter.get_finished_spans()
            encoded.append((out, [_span_view(f) for f in finished], _otlp_bytes(finished) if finished else b"",
                            [(f.dropped_attributes, f.dropped_events, f.dropped_links) for f in finished]))
        assert encoded[0] == encoded[1], headers
    assert direct > 50  # the well-formed sampled parents took the direct path
    provider.shutdown()


class _SeededIds(IdGenerator):
    """Random ids from a seed (reset to replay the same ids): trace ids above and below any ratio bound."""

    def __init__(self, random_ids: bool) -> None:
        self.random_ids = random_ids
        self.rng = random.Random(0)

    def reset(self) -> None:
        self.rng = random.Random(0)

    def generate_span_id(self) -> int:
        return self.rng.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self.rng.getrandbits(128) or 1

    def is_trace_id_random(self) -> bool:
        return self.random_ids


@pytest.mark.parametrize(("root", "random_ids"), [(TraceIdRatioBased(0.5), True), (TraceIdRatioBased(0.25), False),
                                                  (ALWAYS_ON, True), (TraceIdRatioBased(0.0), True)])
def test_new_roots_are_sampled_and_flagged_as_the_sdk_does(root: Any, random_ids: bool,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    ids = _SeededIds(random_ids)
    provider = TracerProvider(sampler=ParentBased(root), id_generator=ids)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(stream_trace, "tracer", provider.get_tracer("borg.stream"))
    sdk_calls = _count_sdk_spans(monkeypatch)
    zero_trace = b"00-" + b"0" * 32 + b"-" + b"1" * 16 + b"-01"  # an invalid parent: a root too
    no_context: list[Any] = [None, [], [("schema", b"nodestate.v1")], [("traceparent", zero_trace)]]
    results = []
    for stage in (old_stage_span, stream_trace.stage_span):
        ids.reset()
        exporter.clear()
        outs = [_run(stage, no_context[i % len(no_context)], {names.NODE_NAME: f"n{i}"}, ()) for i in range(200)]
        results.append((outs, [_span_view(f) for f in exporter.get_finished_spans()]))
    assert results[0] == results[1]
    assert sdk_calls[0] == 200  # only the oracle went through the SDK
    sampled = len(results[0][1])
    assert {0.5: 60 < sampled < 140, 0.25: 20 < sampled < 80, 1.0: sampled == 200, 0.0: sampled == 0}[
        root.rate if isinstance(root, TraceIdRatioBased) else 1.0]
    provider.shutdown()


def _count_sdk_spans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """[spans started through the SDK tracer stage_span uses]."""
    calls = [0]
    real = stream_trace.tracer.start_span

    def counted(*args: Any, **kwargs: Any) -> Span:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(stream_trace.tracer, "start_span", counted)
    return calls


class _OtherProcessor(SpanProcessor):
    """A processor whose on_start may do anything: the direct path must not skip it."""

    def __init__(self) -> None:
        self.started = 0

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        self.started += 1


def test_only_the_exact_common_case_takes_the_direct_path(
        spans: tuple[InMemorySpanExporter, _CountingIds], monkeypatch: pytest.MonkeyPatch) -> None:
    exporter, _ = spans
    sdk_calls = _count_sdk_spans(monkeypatch)
    link = Link(SpanContext(0xAA, 0xBB, is_remote=True, trace_flags=TraceFlags(1)))
    cases: list[tuple[Any, Any, Sequence[Link], bool]] = [
        ([("traceparent", TP)], {names.NODE_NAME: "n"}, (), True),
        ([("traceparent", TP)], {names.NODE_NAME: "n"}, (link,), False),  # links: the SDK validates them
        ([("traceparent", TP[:-2] + b"00")], None, (), True),  # unsampled parent: an unrecorded child, directly
        (None, None, (), True),  # a new root, sampled by the ratio sampler's rule
        ([("traceparent", TP)], {"xs": ["a"]}, (), False),  # sequences are copied by the SDK
        ([("traceparent", TP)], {"score": np.float64(0.5)}, (), False),  # not a plain float
        ([("traceparent", TP)], {"": "empty key"}, (), False),  # dropped with a warning by the SDK
    ]
    for headers, attributes, links, direct in cases:
        before = sdk_calls[0]
        with stream_trace.stage_span("x", headers, topic="t", group="g", attributes=attributes, links=links):
            pass
        assert (sdk_calls[0] == before) is direct, (headers, attributes, links)
    assert len(exporter.get_finished_spans()) == 6  # the unsampled one is not exported
    assert [s.parent is None for s in exporter.get_finished_spans()] == [False, False, True, False, False, False]
    other = _OtherProcessor()
    stream_trace.tracer.span_processor.add_span_processor(other)  # type: ignore[attr-defined]
    before = sdk_calls[0]
    with stream_trace.stage_span("x", [("traceparent", TP)], topic="t", group="g"):
        pass
    assert sdk_calls[0] == before + 1 and other.started == 1


def test_no_direct_path_without_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream_trace, "tracer", trace.NoOpTracer())
    with stream_trace.stage_span("x", [("traceparent", TP)], topic="t", group="g") as ctx:
        out = hdr.build_headers("y", ctx)
    assert hdr.header(out, "traceparent") == TP.decode()  # a no-op tracer passes the parent on


def test_stage_span_ends_the_span_and_lets_exceptions_through(
        spans: tuple[InMemorySpanExporter, _CountingIds]) -> None:
    exporter, _ = spans
    with pytest.raises(RuntimeError, match="boom"), \
            stream_trace.stage_span("x", [("traceparent", TP)], topic="t", group="g"):
        raise RuntimeError("boom")
    (finished,) = exporter.get_finished_spans()
    assert finished.end_time is not None and finished.status.status_code == trace.StatusCode.UNSET
    assert finished.events == ()  # the old generator recorded nothing either


def test_link_to() -> None:
    link = stream_trace.link_to([("traceparent", TP)])
    assert link is not None and link.context.span_id == 0xB7AD6B7169203331 and link.context.is_remote
    assert stream_trace.link_to([("traceparent", TP[:-3])]) is None
    assert stream_trace.link_to(None) is None


def test_random_traceparent_generator_reaches_the_fast_path() -> None:
    """Guard for the generator itself: most cases must be the common well-formed shape."""
    rng = random.Random(0)
    fast = sum(bool(TRACEPARENT_00.fullmatch(random_traceparent(rng))) for _ in range(1000))
    assert 200 < fast < 900
