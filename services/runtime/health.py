"""Liveness, readiness and Prometheus metrics over HTTP (aiohttp)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics

log = logging.getLogger(__name__)
ReadyCheck = Callable[[], bool]
LivenessCheck = Callable[[], str | None]
"""None when alive, else why not (e.g. services.runtime.progress.Progress.check)."""


class HealthServer:
    """/healthz (alive: every liveness check passes, e.g. no stalled input), /readyz (checks registered
    and all pass), /metrics (Prometheus)."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._checks: dict[str, ReadyCheck] = {}
        self._liveness: dict[str, LivenessCheck] = {}
        self._runner: web.AppRunner | None = None
        self.bound_port: int | None = None
        self.app = web.Application()
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/readyz", self._readyz)
        self.app.router.add_get("/metrics", self._metrics)

    def add_check(self, name: str, check: ReadyCheck) -> None:
        self._checks[name] = check

    def add_liveness(self, name: str, check: LivenessCheck) -> None:
        """A failing liveness check makes /healthz answer 503: the orchestrator restarts the process."""
        self._liveness[name] = check

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.bound_port = sockets[0].getsockname()[1] if sockets else self.port
        log.info("health endpoint on http://%s:%s (/healthz /readyz /metrics)", self.host, self.bound_port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _healthz(self, _: web.Request) -> web.Response:
        failures: dict[str, str] = {}
        for name, check in self._liveness.items():
            try:
                reason = check()
            except Exception as exc:  # a broken check must not look like a healthy process
                reason = f"liveness check raised {exc!r}"
            if reason is not None:
                failures[name] = reason
        if failures:
            log.warning("liveness failing: %s", "; ".join(f"{n}: {r}" for n, r in failures.items()))
            return web.json_response({"status": "unhealthy", "checks": failures}, status=503)
        return web.json_response({"status": "ok"})

    async def _readyz(self, _: web.Request) -> web.Response:
        results = {name: bool(check()) for name, check in self._checks.items()}
        # every service registers its checks while it starts: none yet means not started yet
        ok = bool(results) and all(results.values())
        return web.json_response({"ready": ok, "checks": results}, status=200 if ok else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        # OpenMetrics when the scraper asks for it (Prometheus does with exemplar storage on): the only
        # format that carries the latency histogram's exemplars (trace ids)
        if "application/openmetrics-text" in request.headers.get("Accept", ""):
            return web.Response(body=openmetrics.generate_latest(REGISTRY),  # type: ignore[no-untyped-call]
                                headers={"Content-Type": openmetrics.CONTENT_TYPE_LATEST})
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})
