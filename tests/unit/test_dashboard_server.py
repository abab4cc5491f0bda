"""The dashboard's HTTP side without Kafka: page and assets served locally, SSE snapshot then diffs, API, health."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from typing import Any

import aiohttp
import orjson
import pytest

from contracts.topics import REGIMES_TOPIC
from services.dashboard.server import STATIC, DashboardServer
from services.dashboard.settings import DashboardSettings
from services.dashboard.state import DashboardState, StateConfig
from tests.unit.test_dashboard_state import T0, decision, regime, result


@pytest.fixture
async def served() -> AsyncIterator[tuple[DashboardServer, str]]:
    state = DashboardState(StateConfig())
    server = DashboardServer(state, host="127.0.0.1", port=0, push_interval_s=0.05, clock=lambda: T0 / 1000)
    await server.start()
    try:
        yield server, f"http://127.0.0.1:{server.bound_port}"
    finally:
        await server.stop()


class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.refs += [v for k, v in attrs if k in ("src", "href") and v is not None]


def test_page_loads_nothing_from_elsewhere() -> None:
    parser = _Refs()
    parser.feed((STATIC / "index.html").read_text())
    assert "/static/app.js" in parser.refs
    assert "/static/style.css" in parser.refs
    assert all(ref.startswith(("/", "#", "data:")) for ref in parser.refs), parser.refs
    css = (STATIC / "style.css").read_text()
    assert "@import" not in css
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", css)
    js = (STATIC / "app.js").read_text()
    assert not re.search(r"\bimport\s*\(|importScripts|fetch\(\s*['\"`]https?:", js)
    assert 'new EventSource("/events")' in js


async def test_index_static_api_and_health(served: tuple[DashboardServer, str]) -> None:
    server, base = served
    server.state.apply("decisions.v1", decision(trace_id="d" * 32))
    ready = {"caught_up": False}
    server.add_check("state_caught_up", lambda: ready["caught_up"])
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/") as r:
            assert r.status == 200
            assert "text/html" in r.headers["Content-Type"]
            assert "Decisions" in await r.text()
        for asset, kind in (("app.js", "javascript"), ("style.css", "css")):
            async with http.get(f"{base}/static/{asset}") as r:
                assert r.status == 200
                assert kind in r.headers["Content-Type"]
        async with http.get(f"{base}/api/state") as r:
            snap = await r.json()
            assert snap["decisions"][0]["id"] == "d-1"
        async with http.get(f"{base}/api/state", params={"since": str(snap["version"])}) as r:
            assert (await r.json())["decisions"] == []
        async with http.get(f"{base}/api/state", params={"since": "x"}) as r:
            assert r.status == 400
        async with http.get(f"{base}/api/decisions/d-1") as r:
            full = await r.json()
            assert len(full["decision"]["proposals"]) == 3
            assert full["result"] is None
        async with http.get(f"{base}/api/decisions/nope") as r:
            assert r.status == 404
        async with http.get(f"{base}/healthz") as r:
            assert r.status == 200
        async with http.get(f"{base}/readyz") as r:
            assert r.status == 503
            assert (await r.json())["checks"] == {"http": True, "state_caught_up": False}
        ready["caught_up"] = True
        async with http.get(f"{base}/readyz") as r:
            assert r.status == 200
        async with http.get(f"{base}/metrics") as r:
            assert "borg_dashboard_sse_clients" in await r.text()


async def read_event(stream: aiohttp.StreamReader) -> tuple[str, Any]:
    """The next `event:`/`data:` pair of a server-sent event stream."""
    kind, data = "", b""
    while True:
        line = await asyncio.wait_for(stream.readline(), timeout=5)
        if line.startswith(b"event: "):
            kind = line[7:].strip().decode()
        elif line.startswith(b"data: "):
            data = line[6:].strip()
        elif line == b"\n" and kind:
            return kind, orjson.loads(data)


async def test_event_stream_sends_snapshot_then_only_changes(served: tuple[DashboardServer, str]) -> None:
    server, base = served
    server.state.apply(REGIMES_TOPIC, regime("n1", "none", T0))
    async with aiohttp.ClientSession() as http, http.get(f"{base}/events") as r:
        assert r.headers["Content-Type"] == "text/event-stream"
        kind, snap = await read_event(r.content)
        assert kind == "snapshot"
        assert [n["node"] for n in snap["nodes"]] == ["n1"]
        server.state.apply("decisions.v1", decision())
        server.state.apply("actions.v1", result())
        seen: list[Any] = []
        while not any(d["id"] == "d-1" and d["result"] for d in seen):
            kind, diff = await read_event(r.content)
            assert kind == "diff"
            assert diff["nodes"] == []  # n1 did not change
            seen += diff["decisions"]


async def test_stop_ends_open_event_streams(served: tuple[DashboardServer, str]) -> None:
    server, base = served
    async with aiohttp.ClientSession() as http, http.get(f"{base}/events") as r:
        await read_event(r.content)
        await asyncio.wait_for(server.stop(), timeout=5)
        assert not server.running


def test_settings_fall_back_to_the_common_health_address(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DASHBOARD_HOST", "DASHBOARD_PORT", "HEALTH_HOST", "HEALTH_PORT", "DASHBOARD_HEALTH_PORT"):
        monkeypatch.delenv(name, raising=False)
    s = DashboardSettings()
    assert (s.host, s.port, s.health_port) == ("127.0.0.1", 8080, 0)
    monkeypatch.setenv("HEALTH_HOST", "0.0.0.0")
    monkeypatch.setenv("HEALTH_PORT", "8080")
    s = DashboardSettings()
    # the page and health share 8080; the runtime's own listener moves out of the way
    assert (s.host, s.port, s.health_host, s.health_port) == ("0.0.0.0", 8080, "127.0.0.1", 0)
    monkeypatch.setenv("DASHBOARD_PORT", "9999")
    monkeypatch.setenv("DASHBOARD_JAEGER_URL", "http://jaeger.example:16686")
    monkeypatch.setenv("BORG_TOPIC_PREFIX", "t1-")
    s = DashboardSettings()
    config = s.state_config()
    assert (s.port, config.jaeger_url, config.topic_prefix) == (9999, "http://jaeger.example:16686", "t1-")
