"""`borgctl trace <decision-id>`: the decision's trace from Jaeger's API, printed as a tree."""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from borgctl.errors import UserError
from contracts import telemetry as names

DEFAULT_JAEGER = os.environ.get("JAEGER_QUERY_URL", "http://127.0.0.1:16686")


@dataclass
class SpanNode:
    span_id: str
    name: str
    service: str
    start_us: int
    duration_us: int
    tags: dict[str, Any]
    links: list[str] = field(default_factory=list)
    children: list[SpanNode] = field(default_factory=list)


def _get(url: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            data: dict[str, Any] = json.load(response)
            return data
    except urllib.error.URLError as exc:
        raise UserError(
            f"cannot reach Jaeger at {url.split('/api/')[0]}: {exc.reason} (is `borgctl up` running?)", 1
        ) from None


LEGACY_DECISION_ID = "decision.id"
"""The attribute's name before the project's attributes moved under ``borg.``: traces recorded by the
previous release are still found (kept for one release)."""


def find_trace_ids(base: str, decision_id: str, lookback: str = "24h") -> list[str]:
    services = _get(f"{base}/api/services").get("data") or []
    ids: list[str] = []
    for tag in (names.DECISION_ID, LEGACY_DECISION_ID):
        for service in services:
            query = urllib.parse.urlencode(
                {"service": service, "tags": json.dumps({tag: decision_id}), "lookback": lookback, "limit": 20}
            )
            for trace in _get(f"{base}/api/traces?{query}").get("data") or []:
                if trace["traceID"] not in ids:
                    ids.append(trace["traceID"])
        if ids:
            break
    return ids


def build_tree(trace: dict[str, Any]) -> list[SpanNode]:
    processes = {pid: proc["serviceName"] for pid, proc in trace.get("processes", {}).items()}
    nodes: dict[str, SpanNode] = {}
    parents: dict[str, str | None] = {}
    for span in trace["spans"]:
        node = SpanNode(
            span_id=span["spanID"],
            name=span["operationName"],
            service=processes.get(span["processID"], "?"),
            start_us=span["startTime"],
            duration_us=span["duration"],
            tags={t["key"]: t["value"] for t in span.get("tags", [])},
        )
        parent = None
        for ref in span.get("references", []):
            if ref["refType"] == "CHILD_OF" and ref["traceID"] == trace["traceID"]:
                parent = ref["spanID"]
            else:
                node.links.append(f"{ref['traceID'][:8]}…/{ref['spanID'][:8]}")
        nodes[node.span_id] = node
        parents[node.span_id] = parent
    roots = []
    for span_id, node in nodes.items():
        parent_id = parents[span_id]
        if parent_id and parent_id in nodes:
            nodes[parent_id].children.append(node)
        else:
            roots.append(node)
    for node in nodes.values():
        node.children.sort(key=lambda n: n.start_us)
    return sorted(roots, key=lambda n: n.start_us)


INTERESTING = (
    names.NODE_NAME,
    names.REGIME_LABEL,
    names.PROPOSAL_AGENT,
    names.PROPOSAL_KIND,
    names.DECISION_ID,
    names.DECISION_ACTION,
    names.ACTION_OUTCOME,
    names.K8S_VERB,
    names.K8S_OBJECT,
    names.K8S_STATUS_CODE,
    names.MESSAGING_DESTINATION,
)


def render(roots: list[SpanNode], origin_us: int | None = None) -> list[str]:
    lines: list[str] = []
    if origin_us is None:
        origin_us = min((r.start_us for r in roots), default=0)

    def walk(node: SpanNode, prefix: str, last: bool, top: bool) -> None:
        branch = "" if top else ("└─ " if last else "├─ ")
        offset_ms = (node.start_us - origin_us) / 1000
        tags = " ".join(f"{k}={node.tags[k]}" for k in INTERESTING if k in node.tags)
        link = f" links={len(node.links)}" if node.links else ""
        lines.append(
            f"{prefix}{branch}{node.service}: {node.name}  [{node.duration_us / 1000:.2f} ms @+{offset_ms:.1f} ms]"
            f"{link}{'  ' + tags if tags else ''}"
        )
        child_prefix = prefix + ("" if top else ("   " if last else "│  "))
        for i, child in enumerate(node.children):
            walk(child, child_prefix, i == len(node.children) - 1, False)

    for root in roots:
        walk(root, "", True, True)
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="borgctl trace", description=__doc__)
    parser.add_argument("decision_id")
    parser.add_argument("--jaeger", default=DEFAULT_JAEGER, help="Jaeger query URL (default %(default)s)")
    parser.add_argument("--lookback", default="24h")
    args = parser.parse_args(argv)
    base = args.jaeger.rstrip("/")
    trace_ids = find_trace_ids(base, args.decision_id, args.lookback)
    if not trace_ids:
        raise UserError(
            f"no trace in Jaeger carries {names.DECISION_ID}={args.decision_id} (sampled out, or not yet exported?)", 1
        )
    for trace_id in trace_ids:
        data = _get(f"{base}/api/traces/{trace_id}").get("data") or []
        for trace in data:
            roots = build_tree(trace)
            services = sorted({s["serviceName"] for s in trace.get("processes", {}).values()})
            print(f"trace {trace_id}  ({len(trace['spans'])} spans, services: {', '.join(services)})")
            print(f"  {base}/trace/{trace_id}")
            for line in render(roots):
                print("  " + line)
    sys.stdout.flush()
    return 0
