"""Liveness, readiness and Prometheus metrics over HTTP (aiohttp)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

log = logging.getLogger(__name__)
ReadyCheck = Callable[[], bool]


class HealthServer:
    """/healthz (process alive), /readyz (checks registered and all pass), /metrics (Prometheus)."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._checks: dict[str, ReadyCheck] = {}
        self._runner: web.AppRunner | None = None
        self.bound_port: int | None = None
        self.app = web.Application()
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/readyz", self._readyz)
        self.app.router.add_get("/metrics", self._metrics)

    def add_check(self, name: str, check: ReadyCheck) -> None:
        self._checks[name] = check

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
        return web.json_response({"status": "ok"})

    async def _readyz(self, _: web.Request) -> web.Response:
        results = {name: bool(check()) for name, check in self._checks.items()}
        # every service registers its checks while it starts: none yet means not started yet
        ok = bool(results) and all(results.values())
        return web.json_response({"ready": ok, "checks": results}, status=200 if ok else 503)

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})
