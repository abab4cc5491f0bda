"""Kafka header helpers: W3C trace context, content type and schema name.

aiokafka represents headers as a sequence of (str, bytes) pairs; these helpers
are the one place that reads or writes them.

:func:`extract_trace` and :func:`build_headers` run once per message in every stream
stage, so the common case (one well-formed version-00 ``traceparent``, no ``tracestate``,
the default W3C propagators) is parsed and formatted directly (``contracts.fast.traceparent``,
behind its opentelemetry-api guard); anything else goes through OpenTelemetry's propagator
exactly as before. The result is the same either way (``tests/unit/test_trace_fastpath.py``
checks it against the propagator).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import Enum

from opentelemetry import context as otel_context
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagate import get_global_textmap
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace import DEFAULT_TRACE_STATE, INVALID_SPAN_CONTEXT, SpanContext, get_current_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from contracts.fast import traceparent as fast_traceparent
from contracts.fast.traceparent import span_context_in as span_context_in  # re-exported: callers build contexts here

Headers = list[tuple[str, bytes]]
CONTENT_TYPE = "application/json"
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
_TRACE_HEADERS = (TRACEPARENT, TRACESTATE)

_W3C = TraceContextTextMapPropagator()

# Header pairs that never change: built once instead of per message.
_CONTENT_TYPE_HEADER: tuple[str, bytes] = ("content-type", CONTENT_TYPE.encode())
_SCHEMA_HEADERS: dict[str, tuple[str, bytes]] = {}
_SCHEMA_CACHE_MAX = 1024  # schema names are a handful of topics; a bound keeps a misuse from growing it
# The global propagator last found to be plain W3C trace context (+ baggage); see _w3c_global.
_verified_textmap: TextMapPropagator | None = None


def header(headers: Iterable[tuple[str, bytes]] | None, name: str) -> str | None:
    """The last value of a header, decoded as UTF-8, or None."""
    found: str | None = None
    for key, value in headers or ():
        if key == name and value is not None:
            found = value.decode("utf-8", errors="replace")
    return found


def inject_trace(carrier: dict[str, str], ctx: otel_context.Context | None = None) -> None:
    _W3C.inject(carrier, context=ctx)


def _is_w3c_only(textmap: TextMapPropagator) -> bool:
    """True when ``textmap`` extracts exactly what TraceContextTextMapPropagator does from a
    carrier holding only traceparent: trace context alone, or first in a composite whose other
    members are W3C trace context or baggage (baggage leaves a carrier without ``baggage``
    alone). Any other set-up (B3, Jaeger, custom, baggage first) keeps the propagator path."""
    if type(textmap) is TraceContextTextMapPropagator:
        return True
    if type(textmap) is not CompositePropagator:
        return False
    members = getattr(textmap, "_propagators", None)  # read only; unknown layout -> slow path
    if not isinstance(members, (list, tuple)) or not members:
        return False
    if type(members[0]) is not TraceContextTextMapPropagator:
        return False
    return all(type(m) in (TraceContextTextMapPropagator, W3CBaggagePropagator) for m in members)


def _w3c_global() -> bool:
    """Whether the global propagator may be bypassed; re-checked whenever it is replaced."""
    global _verified_textmap
    textmap = get_global_textmap()
    if textmap is _verified_textmap:
        return True
    if _is_w3c_only(textmap):
        _verified_textmap = textmap
        return True
    return False


def _extract_with_propagator(headers: Iterable[tuple[str, bytes]]) -> otel_context.Context:
    """The general path (the original implementation): every case the fast path declines."""
    carrier: dict[str, str] = {}
    for key, value in headers:
        if key in (TRACEPARENT, TRACESTATE) and value is not None:
            carrier[key] = value.decode("ascii", errors="replace")
    return get_global_textmap().extract(carrier) if carrier else otel_context.Context()


class _Propagator(Enum):
    """What :func:`_traceparent_in` answers when only the propagator may read the headers."""

    ONLY = 0


def _traceparent_in(items: Sequence[tuple[str, bytes]]) -> bytes | _Propagator | None:
    """The (last) traceparent header's bytes, None without one, ``_Propagator.ONLY`` for the propagator."""
    traceparent: bytes | None = None
    for key, value in items:
        if key in _TRACE_HEADERS and value is not None:
            # tracestate or a non-bytes value: the general path decides (tracestate parsing, the
            # same decode errors as before). A repeated traceparent: the last one wins, as before.
            if key != TRACEPARENT or value.__class__ is not bytes:
                return _Propagator.ONLY
            traceparent = value
    return traceparent


def _parsed_parent(traceparent: bytes) -> SpanContext | None:
    """What TraceContextTextMapPropagator.extract makes of this header alone (remote, no
    tracestate), or None where the propagator itself must decide."""
    return fast_traceparent.parse(traceparent) if _w3c_global() else None


def extract_trace(headers: Iterable[tuple[str, bytes]] | None) -> otel_context.Context:
    """An OpenTelemetry context continuing the trace in the headers (empty when absent)."""
    if not headers:
        return otel_context.Context()
    # A one-shot iterable could not be scanned twice (fast scan, then the general path).
    items = headers if isinstance(headers, (list, tuple)) else list(headers)
    traceparent = _traceparent_in(items)
    if traceparent is _Propagator.ONLY:
        return _extract_with_propagator(items)
    if traceparent is None:
        return otel_context.Context()
    parent = _parsed_parent(traceparent)
    if parent is None:
        # The carrier the general path would build: this (last) traceparent and nothing else.
        return get_global_textmap().extract({TRACEPARENT: traceparent.decode("ascii", errors="replace")})
    return span_context_in(parent)


def remote_parent(headers: Sequence[tuple[str, bytes]] | None) -> SpanContext | None:
    """The span context ``extract_trace(headers)`` holds, when the fast path gives it (None:
    no traceparent, or one only ``extract_trace`` itself may read)."""
    if not headers or not isinstance(headers, (list, tuple)):
        return None
    traceparent = _traceparent_in(headers)
    if traceparent is None or traceparent is _Propagator.ONLY:
        return None
    return _parsed_parent(traceparent)


def _schema_header(schema: str) -> tuple[str, bytes]:
    pair = _SCHEMA_HEADERS.get(schema) if type(schema) is str else None
    if pair is None:
        pair = ("schema", schema.encode())  # a non-str fails here exactly as before
        if type(schema) is str and len(_SCHEMA_HEADERS) < _SCHEMA_CACHE_MAX:
            _SCHEMA_HEADERS[schema] = pair
    return pair


def build_headers(schema: str, ctx: otel_context.Context | None = None) -> Headers:
    """Headers for one outgoing message: content-type, schema and the current trace context."""
    span_context = get_current_span(ctx).get_span_context()
    if span_context is INVALID_SPAN_CONTEXT:  # no span: the propagator would write nothing
        return [_CONTENT_TYPE_HEADER, _schema_header(schema)]
    return _traced_headers(schema, span_context, ctx, False)


def headers_for_span(schema: str, span_context: SpanContext) -> Headers:
    """``build_headers(schema, ctx)`` for a ``ctx`` holding only ``span_context`` (a stage's output:
    no context is built just to be read back)."""
    if span_context is INVALID_SPAN_CONTEXT:
        return [_CONTENT_TYPE_HEADER, _schema_header(schema)]
    return _traced_headers(schema, span_context, None, True)


def _traced_headers(schema: str, span_context: SpanContext, ctx: otel_context.Context | None,
                    only: bool) -> Headers:
    """``build_headers`` with the span context of ``ctx`` already read (``only``: of a context holding
    only ``span_context``, built here if the propagator must write the header)."""
    value = fast_traceparent.value_of(span_context)
    if value is not None:
        out: Headers = [_CONTENT_TYPE_HEADER, _schema_header(schema), (TRACEPARENT, value)]
        state = span_context.trace_state
        if state is not DEFAULT_TRACE_STATE and state:  # after traceparent, as the propagator does
            out.append((TRACESTATE, state.to_header().encode("ascii")))
        return out
    carrier: dict[str, str] = {}
    inject_trace(carrier, span_context_in(span_context) if only else ctx)
    out = [_CONTENT_TYPE_HEADER, _schema_header(schema)]
    out.extend((k, v.encode("ascii")) for k, v in carrier.items())
    return out


def trace_id_of(headers: Sequence[tuple[str, bytes]] | None) -> str | None:
    """The 32-hex trace id in a traceparent header, or None."""
    tp = header(headers, TRACEPARENT)
    if tp is None:
        return None
    parts = tp.split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None
