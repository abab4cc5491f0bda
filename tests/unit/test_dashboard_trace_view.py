"""The decision trace page's data: Jaeger's trace JSON → waterfall rows, and /api/trace against a Jaeger stand-in."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from services.dashboard.server import DashboardServer
from services.dashboard.state import DashboardState, StateConfig
from services.dashboard.trace_view import MAX_SPANS, spans_of
from tests.unit.test_dashboard_state import decision

TRACE = "ab" * 16


def span(
    span_id: str,
    name: str,
    pid: str,
    start: int,
    duration: int,
    parent: str | None = None,
    links: tuple[tuple[str, str], ...] = (),
    tags: dict[str, Any] | None = None,
) -> dict[str, Any]:
    refs = [{"refType": "CHILD_OF", "traceID": TRACE, "spanID": parent}] if parent else []
    refs += [{"refType": "FOLLOWS_FROM", "traceID": t, "spanID": s} for t, s in links]
    return {
        "traceID": TRACE,
        "spanID": span_id,
        "operationName": name,
        "processID": pid,
        "startTime": start,
        "duration": duration,
        "references": refs,
        "tags": [{"key": k, "value": v} for k, v in (tags or {}).items()],
    }


def jaeger_trace() -> dict[str, Any]:
    return {
        "traceID": TRACE,
        "processes": {
            "p1": {"serviceName": "features"},
            "p2": {"serviceName": "regime"},
            "p3": {"serviceName": "referee"},
        },
        "spans": [
            span("c", "referee decide", "p3", 1_300, 50, parent="b", links=((TRACE, "a"), ("ff" * 16, "12" * 8))),
            span("a", "features window", "p1", 1_000, 100, tags={"borg.node.name": "n1", "span.kind": "consumer"}),
            span("b", "regime infer", "p2", 1_150, 40, parent="a"),
            span("d", "orphan", "p2", 1_200, 10, parent="gone"),
        ],
    }


def test_spans_are_flattened_depth_first_with_offsets_parents_and_links() -> None:
    view = spans_of(jaeger_trace())
    assert [s["span_id"] for s in view["spans"]] == ["a", "b", "c", "d"]  # roots by start, children under them
    a, b, c, d = view["spans"]
    assert (a["depth"], b["depth"], c["depth"], d["depth"]) == (0, 1, 2, 0)
    assert (a["offset_us"], b["offset_us"], c["offset_us"]) == (0, 150, 300)
    assert b["parent"] == "a" and d["parent"] is None  # a parent outside the trace makes a root
    assert c["links"] == [{"trace_id": TRACE, "span_id": "a"}, {"trace_id": "ff" * 16, "span_id": "12" * 8}]
    assert a["service"] == "features" and a["attributes"]["borg.node.name"] == "n1" and a["kind"] == "consumer"
    assert view["services"] == ["features", "referee", "regime"]
    assert view["duration_us"] == 350 and view["truncated"] is False


def test_a_runaway_trace_is_cut_and_says_so() -> None:
    trace = {
        "traceID": TRACE,
        "processes": {"p": {"serviceName": "s"}},
        "spans": [span(f"{i:x}", "x", "p", i, 1) for i in range(MAX_SPANS + 5)],
    }
    view = spans_of(trace)
    assert len(view["spans"]) == MAX_SPANS and view["truncated"] is True


@pytest.fixture
async def jaeger() -> Any:
    """A stand-in for Jaeger's query API: one known trace."""
    app = web.Application()

    async def get_trace(request: web.Request) -> web.Response:
        if request.match_info["trace_id"] != TRACE:
            return web.json_response({"data": None, "errors": [{"code": 404, "msg": "trace not found"}]}, status=404)
        return web.json_response({"data": [jaeger_trace()]})

    app.router.add_get("/api/traces/{trace_id}", get_trace)
    server = TestServer(app)
    await server.start_server()
    yield f"http://127.0.0.1:{server.port}"
    await server.close()


async def _client(query_url: str) -> TestClient[Any, Any]:
    state = DashboardState(StateConfig(jaeger_url="http://jaeger-ui:16686"))
    state.apply("decisions.v1", decision("d-1", trace_id=TRACE), trace_id=TRACE)
    state.apply("decisions.v1", decision("d-2", trace_id="cd" * 16), trace_id="cd" * 16)
    server = DashboardServer(state, jaeger_query_url=query_url)
    client: TestClient[Any, Any] = TestClient(TestServer(server.app))
    await client.start_server()
    return client


async def test_api_trace_serves_the_decisions_waterfall_and_names_what_is_missing(jaeger: str) -> None:
    client = await _client(jaeger)
    try:
        ok = await client.get("/api/trace/d-1")
        assert ok.status == 200
        view = await ok.json()
        assert view["decision_id"] == "d-1" and view["trace_id"] == TRACE
        assert [s["name"] for s in view["spans"]] == ["features window", "regime infer", "referee decide", "orphan"]
        assert view["jaeger_url"] == f"http://jaeger-ui:16686/trace/{TRACE}"
        missing = await client.get("/api/trace/d-2")
        assert missing.status == 404 and "is not in Jaeger" in await missing.text()
        unknown = await client.get("/api/trace/nope")
        assert unknown.status == 404 and "not held" in await unknown.text()
        page = await client.get("/trace/d-1")
        assert page.status == 200 and "/static/trace.js" in await page.text()
    finally:
        await client.close()


async def test_api_trace_says_when_jaeger_cannot_be_reached() -> None:
    client = await _client("http://127.0.0.1:9")  # discard port: nothing listens
    try:
        down = await client.get("/api/trace/d-1")
        assert down.status == 502 and "cannot reach Jaeger at http://127.0.0.1:9" in await down.text()
    finally:
        await client.close()
