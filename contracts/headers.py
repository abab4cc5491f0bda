"""Kafka header helpers: W3C trace context, content type and schema name.

aiokafka represents headers as a sequence of (str, bytes) pairs; these helpers
are the one place that reads or writes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from opentelemetry import context as otel_context
from opentelemetry.propagate import get_global_textmap
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

Headers = list[tuple[str, bytes]]
CONTENT_TYPE = "application/json"
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

_W3C = TraceContextTextMapPropagator()


def header(headers: Iterable[tuple[str, bytes]] | None, name: str) -> str | None:
    """The last value of a header, decoded as UTF-8, or None."""
    found: str | None = None
    for key, value in headers or ():
        if key == name and value is not None:
            found = value.decode("utf-8", errors="replace")
    return found


def inject_trace(carrier: dict[str, str], ctx: otel_context.Context | None = None) -> None:
    _W3C.inject(carrier, context=ctx)


def extract_trace(headers: Iterable[tuple[str, bytes]] | None) -> otel_context.Context:
    """An OpenTelemetry context continuing the trace in the headers (empty when absent)."""
    carrier: dict[str, str] = {}
    for key, value in headers or ():
        if key in (TRACEPARENT, TRACESTATE) and value is not None:
            carrier[key] = value.decode("ascii", errors="replace")
    return get_global_textmap().extract(carrier) if carrier else otel_context.Context()


def build_headers(schema: str, ctx: otel_context.Context | None = None) -> Headers:
    """Headers for one outgoing message: content-type, schema and the current trace context."""
    carrier: dict[str, str] = {}
    inject_trace(carrier, ctx)
    out: Headers = [("content-type", CONTENT_TYPE.encode()), ("schema", schema.encode())]
    out.extend((k, v.encode("ascii")) for k, v in carrier.items())
    return out


def trace_id_of(headers: Sequence[tuple[str, bytes]] | None) -> str | None:
    """The 32-hex trace id in a traceparent header, or None."""
    tp = header(headers, TRACEPARENT)
    if tp is None:
        return None
    parts = tp.split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None
