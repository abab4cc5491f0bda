"""HTTP routes of the extender (aiohttp): filter, prioritize, and the debug views; one span per request."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from opentelemetry import trace
from opentelemetry.propagate import extract
from opentelemetry.trace import SpanKind, Status, StatusCode
from prometheus_client import Counter, Histogram

from contracts import telemetry as names
from contracts.headers import TRACEPARENT, remote_parent
from contracts.models import WORKLOAD_CLASSES
from services.scheduler_extender.extender import BadRequestError, Explanation, Extender
from services.scheduler_extender.shadow import Shadow
from services.scheduler_extender.state import NodeStateStore

log = logging.getLogger(__name__)
_tracer = trace.get_tracer("borg.scheduler_extender")

REQUEST_SECONDS = Histogram(
    "borg_extender_request_seconds",
    "Time to answer one scheduler call (parse, score, encode)",
    ["verb"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1),
)
FILTERED_NODES = Counter("borg_extender_filtered_nodes_total", "Candidate nodes filtered out")
FALLBACKS = Counter("borg_extender_fallbacks_total", "Filter calls where every node was severe (none filtered)")
BAD_REQUESTS = Counter("borg_extender_bad_requests_total", "Calls whose body was not a usable ExtenderArgs", ["verb"])
JSON = "application/json"
LINKED_NODES = 3
"""Nodes whose input messages a call's span links: the top-scored (prioritize) or the filtered (filter)."""
INPUT_NAMES = ("regime", "anomaly", "risk")
EXTENDER_INPUT = "borg.extender.input"
"""Link attribute: what the linked span is (regime / anomaly / risk message, the node's last decision, the
eviction the pod replaces)."""


def linked_nodes(ex: Explanation, limit: int = LINKED_NODES) -> list[str]:
    """The nodes that decided the answer: the best-scored for the pod's class, or those filtered out."""
    if ex.verb == "filter":
        return [n for n in ex.nodes if n in ex.failed][:limit]
    ci = ex.class_index
    order = sorted(range(len(ex.nodes)), key=lambda i: -ex.card(i).scores[ci])
    return [ex.nodes[i] for i in order[:limit]]


def link_inputs(span: trace.Span, ex: Explanation, store: NodeStateStore) -> int:
    """Link ``span`` to the regime / anomaly / risk messages behind the deciding nodes' state, to the referee's
    last action on those nodes, and to the eviction the pod replaces; the count."""
    added = 0
    for node in linked_nodes(ex):
        for name, raw in (*zip(INPUT_NAMES, store.traces(node), strict=True), ("decision", store.node_decision(node))):
            parent = remote_parent([(TRACEPARENT, raw)]) if raw else None
            if parent is not None:
                span.add_link(parent, {names.NODE_NAME: node, EXTENDER_INPUT: name})
                added += 1
    evicted = store.pod_decision(ex.pod.namespace, ex.pod.name, ex.pod.owner)
    parent = remote_parent([(TRACEPARENT, evicted)]) if evicted else None
    if parent is not None:
        span.add_link(parent, {EXTENDER_INPUT: "eviction"})
        added += 1
    return added


def annotate(span: trace.Span, ex: Explanation, max_nodes: int) -> None:
    """Record the request's pod, class and each node's inputs and score (or verdict) on its span."""
    span.set_attribute(names.EXTENDER_POD, ex.pod.key)
    span.set_attribute(names.EXTENDER_WORKLOAD_CLASS, ex.pod.workload_class)
    span.set_attribute(names.EXTENDER_CLASS_SOURCE, ex.pod.class_source)
    span.set_attribute(names.EXTENDER_NODES, len(ex.nodes))
    span.set_attribute(names.EXTENDER_NODES_UNKNOWN, ex.unknown_nodes())
    if ex.verb == "filter":
        span.set_attribute(names.EXTENDER_FILTERED, len(ex.failed))
        if ex.fallback:
            span.set_attribute(names.EXTENDER_FALLBACK, ex.fallback)
    shown = min(max_nodes, len(ex.nodes))
    span.set_attribute(names.EXTENDER_DETAIL_TRUNCATED, shown < len(ex.nodes))
    if shown == 0:
        return
    ci = ex.class_index
    node_names = ex.nodes[:shown]
    cards = [ex.card(i) for i in range(shown)]
    span.set_attribute(names.EXTENDER_NODE_NAMES, node_names)
    span.set_attribute(names.EXTENDER_NODE_INPUTS, [c.summaries[ci] for c in cards])
    if ex.verb == "prioritize":
        span.set_attribute(names.EXTENDER_NODE_SCORES, [c.scores[ci] for c in cards])
    else:
        span.set_attribute(names.EXTENDER_NODE_VERDICTS, [ex.failed.get(n, "pass") for n in node_names])


class ExtenderServer:
    """Serves ``{prefix}/filter``, ``{prefix}/prioritize`` and ``{prefix}/debug/{nodes,last,shadow}``."""

    def __init__(
        self,
        extender: Extender,
        *,
        host: str,
        port: int,
        prefix: str = "",
        span_detail_max_nodes: int = 1000,
        tracer: trace.Tracer | None = None,
        shadow: Shadow | None = None,
        shadow_version: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.extender = extender
        self.shadow = shadow
        self.shadow_version = shadow_version
        self.tracer = tracer or _tracer
        self.host = host
        self.port = port
        self.prefix = prefix.rstrip("/")
        self.span_detail_max_nodes = span_detail_max_nodes
        self.bound_port: int | None = None
        self._runner: web.AppRunner | None = None
        self.app = self.build_app()

    def build_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)  # 5,000-node NodeLists are large
        p = self.prefix
        app.router.add_post(f"{p}/filter", self._verb("filter", self.extender.filter, names.SPAN_EXTENDER_FILTER))
        app.router.add_post(
            f"{p}/prioritize", self._verb("prioritize", self.extender.prioritize, names.SPAN_EXTENDER_PRIORITIZE)
        )
        app.router.add_get(f"{p}/debug/nodes", self._debug_nodes)
        app.router.add_get(f"{p}/debug/last", self._debug_last)
        app.router.add_get(f"{p}/debug/shadow", self._debug_shadow)
        return app

    @property
    def running(self) -> bool:
        return self.bound_port is not None

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        self.bound_port = sockets[0].getsockname()[1] if sockets else self.port
        log.info(
            "scheduler extender on http://%s:%s%s (/filter /prioritize /debug/nodes /debug/last)",
            self.host,
            self.bound_port,
            self.prefix,
        )

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.bound_port = None

    def _verb(
        self, verb: str, call: Callable[[bytes], tuple[bytes, Explanation]], span_name: str
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            # shadow work pauses between its slices while any scheduler call is being answered
            gate = self.shadow.gate if self.shadow is not None else None
            if gate is not None:
                gate.enter()
            try:
                return await answer(request)
            finally:
                if gate is not None:
                    gate.leave()

        async def answer(request: web.Request) -> web.Response:
            started = time.perf_counter()
            body = await request.read()
            span = self.tracer.start_span(span_name, context=extract(request.headers), kind=SpanKind.SERVER)
            try:
                out, explanation = call(body)
            except BadRequestError as exc:
                BAD_REQUESTS.labels(verb).inc()
                span.set_status(Status(StatusCode.ERROR, str(exc)))
                span.set_attribute(names.ERROR_MESSAGE, str(exc))
                span.end()
                log.warning("%s: bad request: %s", verb, exc)
                return web.json_response({"Error": str(exc)}, status=400)
            except Exception as exc:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                span.end()
                raise
            if self.shadow is not None and explanation.verb == "prioritize":
                # Scored by the shadow's worker in slices that give way to any call being answered.
                ctx = span.get_span_context()
                self.shadow.submit(explanation, f"{ctx.trace_id:032x}" if ctx.is_valid else None)
            if span.is_recording():
                # Per-node detail is recorded after the answer is on its way; the span keeps its real end time.
                asyncio.get_running_loop().call_soon(self._finish_span, span, explanation, time.time_ns())
            else:
                span.end()
            if explanation.verb == "filter":
                FILTERED_NODES.inc(len(explanation.failed))
                if explanation.fallback:
                    FALLBACKS.inc()
                    log.warning("filter %s: %s", explanation.pod.key, explanation.fallback)
            REQUEST_SECONDS.labels(verb).observe(time.perf_counter() - started)
            return web.Response(body=out, content_type=JSON)

        return handle

    def _finish_span(self, span: trace.Span, explanation: Explanation, end_ns: int) -> None:
        try:
            annotate(span, explanation, self.span_detail_max_nodes)
            link_inputs(span, explanation, self.extender.store)
        finally:
            span.end(end_time=end_ns)

    async def _debug_shadow(self, request: web.Request) -> web.Response:
        if self.shadow is None:
            return web.json_response({"policy": "heuristic", "mode": None})
        node = request.query.get("node")
        if node is not None:
            return web.json_response({"node": node, "known": self.shadow.debug_node(node)})
        return web.json_response(self.shadow.debug(self.shadow_version()))

    async def _debug_nodes(self, request: web.Request) -> web.Response:
        cls = request.query.get("class")
        if cls is not None and cls not in WORKLOAD_CLASSES:
            return web.json_response({"error": f"class must be one of {list(WORKLOAD_CLASSES)}"}, status=400)
        node = request.query.get("node")
        return web.json_response(self.extender.debug_nodes(cls, node))

    async def _debug_last(self, request: web.Request) -> web.Response:
        limit_text = request.query.get("limit")
        limit = int(limit_text) if limit_text and limit_text.isdigit() else None
        body = {verb: ex.render(limit) for verb, ex in self.extender.last.items()}
        return web.json_response(body)
