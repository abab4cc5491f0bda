"""The W3C ``traceparent`` header read and written directly, as OpenTelemetry's propagator does.

``contracts.headers`` runs once per message at every hop; in the common case (one well-formed
version-00 ``traceparent``, no ``tracestate``, the default W3C propagators: ``headers`` checks
that part) it calls :func:`parse` and :func:`value_of` instead of ``TraceContextTextMapPropagator``.
Both give the propagator's exact answer (``tests/unit/test_trace_fastpath.py`` compares them on
generated headers) and build ``SpanContext`` tuples without its argument handling, which is
opentelemetry-api's layout: when the installed opentelemetry-api is not the release below
(``MIRROR``), :func:`parse` and :func:`value_of` answer None and the propagator decides.
"""

from __future__ import annotations

import re
from typing import Final

from opentelemetry import context as otel_context
from opentelemetry.trace import DEFAULT_TRACE_STATE, NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context
from opentelemetry.trace.propagation import _SPAN_KEY

from contracts.fast import guard

__all__ = ["ACTIVE", "MIRROR", "TRACEPARENT_00", "parse", "span_context_in", "value_of"]

MIRROR: Final = guard.Mirror("traceparent", {"opentelemetry-api": "1.45.2"})
ACTIVE: bool = guard.enabled(MIRROR)
"""Whether the direct parsing and formatting run (re-evaluate with ``guard.enabled(MIRROR)``)."""

# A traceparent the fast path takes: version 00, lowercase hex, nothing around it. Anything
# else (other versions, padding, suffixes, upper case) is left to the propagator's own rules.
TRACEPARENT_00: Final = re.compile(rb"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
# The 256 possible flag bytes -> TraceFlags, instead of int() + TraceFlags() per message.
_TRACE_FLAGS: Final[dict[bytes, TraceFlags]] = {b"%02x" % i: TraceFlags(i) for i in range(256)}


def parse(traceparent: bytes) -> SpanContext | None:
    """What ``TraceContextTextMapPropagator.extract`` makes of this header alone (remote, no
    tracestate), or None where the propagator itself must decide."""
    if not ACTIVE:
        return None
    match = TRACEPARENT_00.fullmatch(traceparent)
    if match is None:
        return None
    trace_id = int(match[1], 16)
    span_id = int(match[2], 16)
    if not trace_id or not span_id:  # all-zero ids are invalid: the propagator returns an empty context
        return None
    # SpanContext(trace_id, span_id, True, flags, None) without its argument handling: the ids
    # are non-zero and within 128 / 64 bits (32 / 16 hex digits), so it is valid.
    return tuple.__new__(SpanContext, (trace_id, span_id, True, _TRACE_FLAGS[match[3]], DEFAULT_TRACE_STATE, True))


def value_of(span_context: SpanContext) -> bytes | None:
    """The ``traceparent`` value ``TraceContextTextMapPropagator.inject`` writes for a valid context
    (None: the propagator must decide, e.g. a subclass or another layout)."""
    if not ACTIVE or span_context.__class__ is not SpanContext:
        return None
    # One unpack of the (declared) tuple instead of five property calls.
    trace_id, span_id, _remote, flags, _state, valid = span_context
    # A valid context is formatted as the propagator does (valid implies 0 < ids <= max);
    # plain ints only, so the bytes cannot differ.
    if valid and type(trace_id) is int and type(span_id) is int and type(flags) in (TraceFlags, int):
        return b"00-%032x-%016x-%02x" % (trace_id, span_id, flags)
    return None


def span_context_in(span_context: SpanContext) -> otel_context.Context:
    """``set_span_in_context(NonRecordingSpan(span_context), Context())``: a context holding
    only that span (built directly, as ``set_value`` would copy an empty one)."""
    if not ACTIVE:
        return set_span_in_context(NonRecordingSpan(span_context), otel_context.Context())
    return otel_context.Context({_SPAN_KEY: NonRecordingSpan(span_context)})
