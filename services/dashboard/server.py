"""The dashboard's HTTP side (aiohttp): page, server-sent events, JSON, health and metrics on one port.

- ``/`` and ``/static/*``: the hand-written page (no framework, no CDN: everything is served here);
- ``/events``: server-sent events; a full ``snapshot`` on connect, then at most one ``diff`` per
  push interval with only what changed (throttled server-side, so a busy pipeline or hundreds of
  nodes cannot flood the browser); the browser's EventSource reconnects by itself;
- ``/api/state`` (``?since=<version>`` for a diff), ``/api/decisions/<id>`` (the full Decision and
  ActionResult as received, evidence included);
- ``/trace/<decision_id>`` (page) and ``/api/trace/<decision_id>`` (JSON): the decision's trace from
  Jaeger's query API (``jaeger_query_url``) as a waterfall (``trace_view.spans_of``);
- ``/api/arena``: the latest arena results (``arena.load_arena``: policies side by side against
  kube-default), read from ``arena_results`` at each request (the file is small);
- ``/healthz`` ``/readyz`` ``/metrics`` as the runtime's HealthServer serves them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Gauge, generate_latest

from services.dashboard.arena import load_arena
from services.dashboard.state import DashboardState
from services.dashboard.trace_view import spans_of

log = logging.getLogger(__name__)
STATIC = Path(__file__).resolve().parent / "static"
SSE_CLIENTS = Gauge("borg_dashboard_sse_clients", "Browsers connected to /events")
ReadyCheck = Callable[[], bool]


class DashboardServer:
    def __init__(
        self,
        state: DashboardState,
        *,
        host: str = "127.0.0.1",
        port: int = 8080,
        push_interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        arena_results: Path | None = None,
        jaeger_query_url: str = "http://127.0.0.1:16686",
    ) -> None:
        self.state = state
        self.arena_results = arena_results
        self.jaeger_query_url = jaeger_query_url.rstrip("/")
        self.host = host
        self.port = port
        self.push_interval_s = push_interval_s
        self.clock = clock
        self.bound_port: int | None = None
        self._checks: dict[str, ReadyCheck] = {}
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.app = web.Application()
        r = self.app.router
        r.add_get("/", self._index)
        r.add_static("/static/", STATIC, append_version=False)
        r.add_get("/events", self._events)
        r.add_get("/api/state", self._api_state)
        r.add_get("/api/decisions/{decision_id}", self._api_decision)
        r.add_get("/api/arena", self._api_arena)
        r.add_get("/api/trace/{decision_id}", self._api_trace)
        r.add_get("/trace/{decision_id}", self._trace_page)
        r.add_get("/healthz", self._healthz)
        r.add_get("/readyz", self._readyz)
        r.add_get("/metrics", self._metrics)

    @property
    def running(self) -> bool:
        return self.bound_port is not None and not self._closing.is_set()

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.bound_port}/"

    def add_check(self, name: str, check: ReadyCheck) -> None:
        self._checks[name] = check

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=5.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        self.bound_port = sockets[0].getsockname()[1] if sockets else self.port
        log.info("dashboard on %s (events /events, state /api/state, health /healthz /readyz /metrics)", self.url)

    async def stop(self) -> None:
        self._closing.set()  # event streams end their loops; then the runner closes the connections
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    # ---------------------------------------------------------------- handlers

    async def _index(self, _: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    async def _events(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # a buffering proxy in front would hold the stream back
            }
        )
        await response.prepare(request)
        SSE_CLIENTS.inc()
        since: int | None = None
        try:
            await response.write(b"retry: 2000\n\n")
            while not self._closing.is_set():
                snap = self.state.snapshot(self._now_ms(), since)
                since = snap["version"]
                await response.write(
                    b"event: " + snap["type"].encode() + b"\ndata: " + orjson.dumps(snap) + b"\n\n"
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), timeout=self.push_interval_s)
        except (ConnectionResetError, ConnectionError):
            pass  # the browser went away
        finally:
            SSE_CLIENTS.dec()
        return response

    async def _api_state(self, request: web.Request) -> web.Response:
        since_raw = request.query.get("since")
        try:
            since = int(since_raw) if since_raw not in (None, "") else None
        except ValueError:
            raise web.HTTPBadRequest(text=f"since must be an integer version, got {since_raw!r}") from None
        body = orjson.dumps(self.state.snapshot(self._now_ms(), since))
        return web.Response(body=body, content_type="application/json")

    async def _api_decision(self, request: web.Request) -> web.Response:
        entry = self.state.decisions.get(request.match_info["decision_id"])
        if entry is None:
            raise web.HTTPNotFound(text="decision not held (unknown, or older than the newest DASHBOARD_MAX_DECISIONS)")
        body = {
            "decision": entry.decision.model_dump(mode="json"),
            "result": entry.result.model_dump(mode="json") if entry.result else None,
            "trace_id": entry.trace_id,
        }
        return web.Response(body=orjson.dumps(body, option=orjson.OPT_INDENT_2), content_type="application/json")

    async def _trace_page(self, _: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "trace.html", headers={"Cache-Control": "no-cache"})

    async def _api_trace(self, request: web.Request) -> web.Response:
        decision_id = request.match_info["decision_id"]
        entry = self.state.decisions.get(decision_id)
        if entry is None:
            raise web.HTTPNotFound(text=f"decision {decision_id} not held (unknown, or older than the newest "
                                        "DASHBOARD_MAX_DECISIONS)")
        trace_id = entry.trace_id or entry.decision.trace_id
        if not trace_id:
            raise web.HTTPNotFound(text=f"decision {decision_id} carries no trace id (tracing was off)")
        url = f"{self.jaeger_query_url}/api/traces/{trace_id}"
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http, http.get(url) as r:
                if r.status == 404:
                    raise web.HTTPNotFound(text=f"trace {trace_id} is not in Jaeger at {self.jaeger_query_url} "
                                                "(not exported yet, or expired)")
                if r.status != 200:
                    raise web.HTTPBadGateway(text=f"Jaeger answered {r.status} for {url}")
                body = await r.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise web.HTTPBadGateway(text=f"cannot reach Jaeger at {self.jaeger_query_url}: {exc!r}") from None
        traces = body.get("data") if isinstance(body, dict) else None
        if not traces:
            raise web.HTTPNotFound(text=f"trace {trace_id} is not in Jaeger at {self.jaeger_query_url}")
        view = spans_of(traces[0])
        view.update(decision_id=decision_id, jaeger_url=f"{self.state.config.jaeger_url.rstrip('/')}/trace/{trace_id}")
        return web.Response(body=orjson.dumps(view), content_type="application/json")

    async def _api_arena(self, _: web.Request) -> web.Response:
        view = await asyncio.to_thread(load_arena, self.arena_results)
        return web.Response(body=orjson.dumps(view), content_type="application/json")

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, _: web.Request) -> web.Response:
        results = {"http": self.running} | {name: bool(check()) for name, check in self._checks.items()}
        ok = all(results.values())
        return web.json_response({"ready": ok, "checks": results}, status=200 if ok else 503)

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})
