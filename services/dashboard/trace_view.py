"""A decision's trace for the dashboard's waterfall: Jaeger's query API JSON → a flat list of spans (pure).

``spans_of(trace)`` takes one trace as Jaeger's ``GET /api/traces/<trace id>`` returns it (``data[0]``:
``spans`` with ``operationName``, ``startTime`` / ``duration`` in µs, ``references``; ``processes`` with
``serviceName``) and gives every span as ``{span_id, parent, service, name, start_us, duration_us,
offset_us, depth, links, attributes, kind}``, ordered as the waterfall draws them: depth-first from the
roots, children by start time. ``offset_us`` is from the trace's first span; a gap between a span's end
and a child's start is time spent waiting (in Kafka, for a hop from one service to the next).
``links`` are the span links (fan-in: the proposals a decision weighed), each ``{trace_id, span_id}``.
"""

from __future__ import annotations

from typing import Any

MAX_SPANS = 2000
"""Spans drawn at most (a decision's trace has tens; a runaway trace is cut, and says so)."""
MAX_VALUE = 500
"""Characters of an attribute value kept."""


def _attributes(span: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for tag in span.get("tags") or []:
        value = tag.get("value")
        if isinstance(value, str) and len(value) > MAX_VALUE:
            value = value[:MAX_VALUE] + "…"
        out[str(tag.get("key"))] = value
    return out


def spans_of(trace: dict[str, Any]) -> dict[str, Any]:
    """``{"trace_id", "spans": [...], "services": [...], "duration_us", "truncated"}`` (see the module doc)."""
    trace_id = str(trace.get("traceID", ""))
    processes = {pid: (p or {}).get("serviceName", "?") for pid, p in (trace.get("processes") or {}).items()}
    raw = [s for s in trace.get("spans") or [] if isinstance(s, dict) and "spanID" in s]
    truncated = len(raw) > MAX_SPANS
    raw = sorted(raw, key=lambda s: (int(s.get("startTime", 0)), str(s["spanID"])))[:MAX_SPANS]
    by_id: dict[str, dict[str, Any]] = {}
    for s in raw:
        parent = None
        links = []
        for ref in s.get("references") or []:
            if ref.get("refType") == "CHILD_OF" and ref.get("traceID") == trace_id and parent is None:
                parent = str(ref.get("spanID"))
            else:
                links.append({"trace_id": str(ref.get("traceID")), "span_id": str(ref.get("spanID"))})
        attributes = _attributes(s)
        by_id[str(s["spanID"])] = {
            "span_id": str(s["spanID"]),
            "parent": parent,
            "service": processes.get(s.get("processID"), "?"),
            "name": str(s.get("operationName", "")),
            "start_us": int(s.get("startTime", 0)),
            "duration_us": int(s.get("duration", 0)),
            "links": links,
            "attributes": attributes,
            "kind": attributes.get("span.kind"),
        }
    start = min((s["start_us"] for s in by_id.values()), default=0)
    end = max((s["start_us"] + s["duration_us"] for s in by_id.values()), default=0)
    children: dict[str | None, list[dict[str, Any]]] = {}
    for s in by_id.values():
        parent = s["parent"] if s["parent"] in by_id else None  # a parent outside the trace: a root here
        s["parent"] = parent
        children.setdefault(parent, []).append(s)
    ordered: list[dict[str, Any]] = []
    stack = [(s, 0) for s in reversed(children.get(None, []))]
    while stack:
        span, depth = stack.pop()
        span["depth"] = depth
        span["offset_us"] = span["start_us"] - start
        ordered.append(span)
        stack.extend((c, depth + 1) for c in reversed(children.get(span["span_id"], [])))
    services = sorted({s["service"] for s in ordered})
    return {"trace_id": trace_id, "spans": ordered, "services": services, "duration_us": end - start,
            "truncated": truncated}
