"""End to end in real headless Chromium (Debian's `chromium`), driven over the DevTools protocol.

Traffic for 300 nodes is replayed onto a fresh topic namespace, the dashboard runs as `borgctl serve
dashboard` runs it (`body()`), and the page is loaded in the browser: the test waits for a decision
row with its competing proposals, checks a node's regime cell, sees a new decision arrive live
(no reload), checks the page raised no JavaScript error, and saves a screenshot to
test-artifacts/dashboard.png. The DevTools client is a small aiohttp websocket client (no
Playwright, no browser download).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import re
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from contracts.models import (
    DriftReport,
    FeatureDrift,
    FeatureVector,
    LoadForecast,
    LoadQuantiles,
    RegimeLabelV2,
    RolloutEvent,
)
from contracts.topics import DRIFT_TOPIC, FORECASTS_TOPIC, Topic
from featurelib.node.schema import FEATURE_INDEX, N_FEATURES, node_feature_schema_hash
from loadtests.procs import free_port
from services.runtime.producer import Producer
from tests.conftest import ROOT, wait_until
from tests.integration.test_dashboard_kafka import (
    cluster_state,
    conflicting_decisions,
    regime_of,
    replay_node_signals,
    replay_traffic,
    running_dashboard,
    settings_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
    "--window-size=1600,1000",
]
ARTIFACT = ROOT / "test-artifacts" / "dashboard.png"
LOAD_ARTIFACT = ROOT / "test-artifacts" / "dashboard-forecast-drift.png"
NODES = 300


class DevTools:
    """Just enough of the Chrome DevTools protocol: commands, and the events the page raised."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(msg.data)
            future = self.pending.pop(data.get("id", -1), None)
            if future is None:
                self.events.append(data)
            elif "error" in data:
                future.set_exception(RuntimeError(f"DevTools: {data['error']}"))
            else:
                future.set_result(data.get("result", {}))

    async def call(self, method: str, timeout: float = 30, **params: Any) -> Any:
        call_id = next(self.ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[call_id] = future
        await self.ws.send_str(json.dumps({"id": call_id, "method": method, "params": params}))
        return await asyncio.wait_for(future, timeout=timeout)

    async def eval(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"page error evaluating {expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, *, timeout: float = 30, what: str) -> Any:
        async def check() -> Any:
            return await self.eval(expression)

        return await wait_until(check, timeout=timeout, interval=0.1, what=what)

    def page_errors(self) -> list[str]:
        errors = []
        for e in self.events:
            if e.get("method") == "Runtime.exceptionThrown":
                errors.append(str(e["params"]["exceptionDetails"]))
            elif e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] == "error":
                errors.append(str(e["params"]["args"]))
            elif e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error":
                errors.append(e["params"]["entry"].get("text", ""))
        return errors


@contextlib.asynccontextmanager
async def chromium(tmp_path: Path) -> AsyncIterator[DevTools]:
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed (scripts/ensure-system.sh installs Debian's package)")
    proc = await asyncio.create_subprocess_exec(
        CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "about:blank",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    seen: list[str] = []
    drain: asyncio.Task[None] | None = None
    try:
        async def devtools_url() -> str:
            assert proc.stderr is not None
            while True:
                line = (await proc.stderr.readline()).decode(errors="replace")
                if not line:
                    raise AssertionError("chromium exited:\n" + "".join(seen[-20:]))
                seen.append(line)
                found = re.search(r"DevTools listening on (ws://\S+)", line)
                if found:
                    return found.group(1)

        browser_ws = await asyncio.wait_for(devtools_url(), timeout=60)

        async def discard() -> None:
            assert proc.stderr is not None
            while await proc.stderr.readline():
                pass

        drain = asyncio.create_task(discard())  # keep the pipe from filling up
        port = browser_ws.split("://", 1)[1].split("/", 1)[0]
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://{port}/json/list") as r:
                targets = await r.json()
            page = next(t for t in targets if t["type"] == "page")
            async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                tools = DevTools(ws)
                for domain in ("Page", "Runtime", "Log"):
                    await tools.call(f"{domain}.enable")
                await tools.call("Emulation.setDeviceMetricsOverride", width=1600, height=1000, deviceScaleFactor=1,
                                 mobile=False)
                try:
                    yield tools
                finally:
                    tools.reader.cancel()
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), timeout=10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if drain is not None:
            drain.cancel()


BUCKET_MS = 300_000
HORIZONS_S = (300, 900, 1800)


def load_cpu(k: int) -> float:
    """Actual CPU of node load-0 in the k-th of five 5-minute buckets (the forecasts below miss it by 0.04)."""
    return 0.2 + 0.1 * k


async def produce_load_and_drift(bootstrap: str, prefix: str) -> None:
    """features.v1 vectors for two nodes over five buckets, forecasts made at the first three bucket ends
    (load-0: p50 = this bucket's actual + 0.06, the next bucket's actual is + 0.1, i.e. 0.04 off; load-1: unknown),
    and drift reports of two models."""
    producer = Producer(bootstrap=bootstrap, client_id="dashboard-browser-load", topic_prefix=prefix, linger_ms=20)
    await producer.start()
    try:
        now = int(time.time() * 1000)
        ends = [now - now % BUCKET_MS - (4 - k) * BUCKET_MS for k in range(5)]  # the last one is still open
        schema = node_feature_schema_hash()
        for k, end in enumerate(ends):
            for node, cpu in (("load-0", load_cpu(k)), ("load-1", 0.5)):
                values = [0.0] * N_FEATURES
                values[FEATURE_INDEX["cpu_util_mean_10s"]] = cpu
                values[FEATURE_INDEX["mem_util_mean_10s"]] = 0.4
                for back in (200_000, 100_000):
                    ts = end - back
                    await producer.send("features.v1", node, FeatureVector(
                        node=node, ts_ms=ts, window_s=10, schema_hash=schema, values=values,
                        valid=[True] * N_FEATURES, samples=10, input_ts_ms=ts))
            if k < 3:
                p50 = round(load_cpu(k) + 0.06, 4)  # next bucket's actual is load_cpu(k) + 0.1
                quantiles = [LoadQuantiles(horizon_s=h, resource=r, p50=p50, p90=p50 + 0.1)  # type: ignore[arg-type]
                             for h in HORIZONS_S for r in ("cpu", "memory")]
                await producer.send(FORECASTS_TOPIC, "load-0", LoadForecast(
                    node="load-0", ts_ms=end + 5000, window_end_ms=end, status="ok", history_buckets=200,
                    quantiles=quantiles, model_version="fc-browser", input_ts_ms=end))
        await producer.send(FORECASTS_TOPIC, "load-1", LoadForecast(
            node="load-1", ts_ms=ends[3] + 5000, window_end_ms=ends[3], status="unknown",
            reason="insufficient_history", history_buckets=4, model_version="fc-browser", input_ts_ms=ends[3]))
        common: dict[str, Any] = {"model_version": "v-test", "window_s": 300.0, "data_threshold": 0.12,
                                  "feature_threshold": 0.25, "prediction_threshold": 0.2}
        for i in range(3):  # a short history: the last report of regime is `drift`
            await producer.send(DRIFT_TOPIC, "regime", DriftReport(
                model="regime", ts_ms=now - (2 - i) * 30_000, samples=1400, prediction_samples=1400,
                status="drift" if i == 2 else "no_drift", reasons=["data score 0.310 > 0.12"] if i == 2 else [],
                data_score=0.05 + 0.13 * i, max_psi=0.9, features_over=7,
                features=[FeatureDrift(feature="llc_miss_ratio_10s", psi=0.9, missing_rate=0.0,
                                       reference_missing_rate=0.0)],
                prediction_psi=0.04, predictions={"none": 0.6, "llc": 0.4}, missing_rate=0.0,
                reference_missing_rate=0.0, **common))
        failure: dict[str, Any] = {
            "model": "failure", "ts_ms": now, "samples": 0, "prediction_samples": 12,
            "status": "insufficient_data", "reasons": ["12 answers < 300"], **common}
        if "concept" in DriftReport.model_fields:  # concept drift, when drift.v1 carries it: drawn generically
            failure["concept"] = [{"horizon_s": 300, "status": "insufficient_data", "labels": 3, "positives": 1}]
        await producer.send(DRIFT_TOPIC, "failure", DriftReport.model_validate(failure))
        for status, step, reason in (("running", 1, ""), ("rolled_back", 2, "candidate matched_accuracy 0.412 vs "
                                                          "current 0.903: worse by more than the margin 0.05")):
            await producer.send(Topic.ROLLOUTS, "regime", RolloutEvent(
                model="regime", ts_ms=now - (2 - step) * 1000, rollout_id=now - 5000, candidate="v-cand",
                baseline="v-test", status=status, step=step, steps=3, fraction=0.5 if step == 2 else 0.1,  # type: ignore[arg-type]
                reason=reason, origin="judged", reporter="regime-0", compared=900, labelled=800,
                metrics={"matched_accuracy_current": 0.903, "matched_accuracy_candidate": 0.412}))
        # the pod-relative model's shadow label of node-007 (shown beside the node model's)
        await producer.send(Topic.PODREGIMES, "node-007", RegimeLabelV2(
            node="node-007", ts_ms=now, regime="membw", confidence=0.91, raw_regime="membw", changed=False,
            interference={}, model_version="pods-browser", input_ts_ms=now))
        await producer.flush()
    finally:
        await producer.stop()


async def test_dashboard_in_headless_chromium(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    started = time.monotonic()
    traffic = await replay_traffic(kafka_bootstrap, topic_prefix, nodes=NODES, rounds=6)
    await produce_load_and_drift(kafka_bootstrap, topic_prefix)
    arena = tmp_path / "arena"
    arena.mkdir()
    rows = [("kube-default", 200.0, 0.50), ("random", 300.0, 0.48), ("extender", 120.0, 0.52)]
    (arena / "results.json").write_text(json.dumps({"machine": {"commit": "t"}, "results": [
        r for case, slo, util in rows for r in (
            {"bench": "arena", "case": case, "metric": "slo_violation_task_s", "value": slo, "unit": "s"},
            {"bench": "arena", "case": case, "metric": "mean_cpu_utilisation", "value": util, "unit": "ratio"})]}))
    settings = settings_for(topic_prefix, port=free_port(), history_minutes=1, arena_results=arena)
    async with running_dashboard(settings) as base, chromium(tmp_path) as page:
        await page.call("Page.navigate", url=f"{base}/")
        await page.wait_for("document.readyState === 'complete' && !!window.__dashboard", what="page loaded")
        # the Benefit panel: the arena's policies side by side, ratios to kube-default, better/worse marked
        benefit = await page.wait_for(
            """(() => { const c = document.querySelector(
                  '#benefit tr[data-metric="slo_violation_task_s"] td[data-policy="extender"]');
                return c ? {text: c.textContent, cls: c.className,
                            worse: document.querySelector('#benefit tr[data-metric="slo_violation_task_s"]'
                                   + ' td[data-policy="random"]').className,
                            heads: [...document.querySelectorAll('#benefit th')].map(t => t.textContent)}
                         : null; })()""",
            what="arena results in the Benefit panel",
        )
        assert benefit["heads"] == ["metric", "kube-default", "random", "extender"], benefit
        assert benefit["text"] == "1200.60×", benefit  # the value, then its ratio to kube-default
        assert "better" in benefit["cls"] and "worse" in benefit["worse"], benefit
        await page.eval("window.__noReload = true")

        # a decision row with every proposal it weighed, side by side and colour-coded by agent
        row = await page.wait_for(
            """(() => {
                 const row = document.querySelector('[data-decision-id="d-web"]');
                 if (!row || row.dataset.outcome !== 'dry-run') return null;
                 const props = [...row.querySelectorAll('.proposal')];
                 return {
                   agents: props.map(p => p.dataset.agent),
                   kinds: props.map(p => p.dataset.kind),
                   chosen: props.filter(p => p.classList.contains('chosen')).map(p => p.dataset.agent),
                   colours: props.map(p => getComputedStyle(p).borderLeftColor),
                   reason: row.querySelector('.reason').textContent,
                   trace: row.querySelector('a.trace') && row.querySelector('a.trace').href,
                 };
               })()""",
            what="decision d-web with its proposals",
        )
        assert row["agents"] == ["reliability", "efficiency", "admission"]
        assert row["kinds"] == ["scale_out", "scale_in", "throttle"]
        assert row["chosen"] == ["reliability"]
        assert len(set(row["colours"])) == 3  # one colour per agent
        assert "safety over efficiency" in row["reason"]
        assert row["trace"] == f"{base}/trace/d-web"  # the dashboard's own waterfall of the decision's trace
        outcomes = await page.eval(
            "[...document.querySelectorAll('[data-decision-id]')].map(r => r.dataset.outcome).sort()")
        assert outcomes == ["applied", "dry-run", "failed", "refused"]

        # every node arrived; the list is virtualised (only the rows in view exist)
        await page.wait_for(f"window.__dashboard.nodes.size === {NODES}", what=f"{NODES} nodes")
        rendered_rows = await page.eval("document.querySelectorAll('#nodes-rows .nrow').length")
        assert 0 < rendered_rows < 80

        # a per-node regime cell, found the way an operator would: by filtering
        await page.eval("""(() => { const f = document.getElementById('node-filter');
                                     f.value = 'node-007'; f.dispatchEvent(new Event('input')); })()""")
        expected = regime_of(7, traffic.rounds - 1)
        cell = await page.wait_for(
            """(() => { const c = document.querySelector('[data-node="node-007"] .regime-cell');
                        const p = c && c.querySelector('.pod-regime');
                        return c && c.dataset.regime && p ? {regime: c.dataset.regime, text: c.textContent,
                          pods: p.textContent, strip: c.parentElement.querySelectorAll('svg.spark rect').length}
                          : null; })()""",
            what="regime cell of node-007 with the pod-relative label",
        )
        assert cell["regime"] == expected
        assert cell["text"].startswith(expected)
        assert cell["pods"] == "pods: membw"  # the shadow label beside it, never in its place
        assert cell["strip"] >= 2  # the regime history sparkline has the replayed rounds

        # cluster state beside the orchestrator's intent, and pipeline health
        await page.wait_for(
            """(() => { const q = (s) => document.querySelector(s);
                        const r = q('[data-deployment="Deployment/shop/web"] .badge.s-not-applied');
                        return !!r && !!document.querySelector('[data-group$="features-test"]')
                          && !!document.querySelector('details.dl[data-source="nodestate.v1"]'); })()""",
            what="cluster table, consumer lag and dead letter",
        )

        # new decisions, cluster state and node signals produced now appear without reloading the page
        producer = Producer(bootstrap=kafka_bootstrap, client_id="dashboard-browser-test", topic_prefix=topic_prefix)
        await producer.start()
        try:
            now = int(time.time() * 1000)
            live, result = conflicting_decisions(now, tag="-live")[1]
            await producer.send("decisions.v1", live.target.key(), live)
            await producer.send("actions.v1", live.target.key(), result)
            # then the watcher still reports 2 replicas where the applied decision asked for 1
            await producer.send("clusterstate.v1", "local/shop", cluster_state(now + 500, api_desired=2))
            await replay_node_signals(producer, NODES, traffic.rounds, now + 1000)  # one more round, every node
        finally:
            await producer.stop()
        await page.wait_for(
            "!!document.querySelector('[data-decision-id=\"d-api-live\"][data-outcome=\"applied\"]')",
            what="live decision row",
        )
        await page.wait_for(
            "!!document.querySelector('[data-deployment=\"Deployment/shop/api\"] .badge.s-differs')",
            what="api deployment marked as differing from the orchestrator's decision",
        )
        live_regime = regime_of(7, traffic.rounds)
        assert live_regime != expected
        strip = cell["strip"] + 1
        await page.wait_for(
            f"""(() => {{ const c = document.querySelector('[data-node="node-007"] .regime-cell');
                         return !!c && c.dataset.regime === '{live_regime}'
                           && c.parentElement.querySelectorAll('svg.spark rect').length === {strip}; }})()""",
            what="node-007's regime and history updated in place",
        )
        assert await page.eval("window.__noReload === true")

        # forecast beside actual: latest p50/p90 per horizon, chart, rolling WAPE; `unknown` with its reason
        load = await page.wait_for(
            """(() => { const r = document.querySelector('#load tr[data-load-node="load-0"]');
                        const u = document.querySelector('#load tr[data-load-node="load-1"]');
                        if (!r || !u || !r.querySelector('.fc-w[data-h="300"]')) return null;
                        const w = r.querySelector('.fc-w[data-h="300"]').textContent;
                        if (w === '–') return null;
                        return {status: r.dataset.status, q5: r.querySelector('td.fc-q[data-h="300"]').textContent,
                                wape5: w, actual: r.querySelector('td.num').textContent,
                                lines: [...r.querySelectorAll('svg.fc-chart polyline')]
                                         .map(p => p.getAttribute('class')),
                                unknown: u.dataset.status, why: u.querySelector('.fc-status').textContent,
                                fleet: document.querySelector('#load-summary .fc-w[data-h="300"] b').textContent,
                                summary: document.getElementById('load-summary').textContent}; })()""",
            what="forecast vs actual rows with a scored 5-minute WAPE",
        )
        # the latest forecast (made at the third bucket's end): p50 = load_cpu(2) + 0.06, p90 = p50 + 0.1
        assert load["status"] == "ok" and load["q5"] == "46% /56%", load
        assert load["actual"].startswith("60%"), load  # the open bucket's newest 10 s mean, load_cpu(4)
        # three scored 5-minute targets, each 0.04 under the actual: 0.12 / (0.3 + 0.4 + 0.5)
        assert load["wape5"] == "0.10" and load["fleet"] == "0.10", load
        assert {"actual", "f300", "f900", "f1800"} <= set(load["lines"]), load
        assert load["unknown"] == "unknown" and "insufficient history" in load["why"], load
        assert "1 unknown (insufficient history 1)" in load["summary"], load
        # drift per model: status, scores against thresholds, top inputs, any further field generically
        drift = await page.wait_for(
            """(() => { const m = document.querySelector('#drift .drift-model[data-model="regime"]');
                        const f = document.querySelector('#drift .drift-model[data-model="failure"]');
                        if (!m || !f) return null;
                        return {status: m.dataset.status, text: m.textContent,
                                spark: m.querySelectorAll('svg.spark polyline').length,
                                failure: f.dataset.status, ftext: f.textContent,
                                concept: [...f.querySelectorAll('.drift-field[data-field="concept"] td')]
                                           .map(t => t.textContent),
                                count: document.getElementById('drift-count').textContent}; })()""",
            what="drift panel with both models",
        )
        assert drift["status"] == "drift" and "0.310" in drift["text"] and "llc_miss_ratio_10s" in drift["text"], drift
        assert drift["spark"] == 2, drift  # data score and prediction PSI histories
        assert drift["failure"] == "insufficient_data" and "12 answers < 300" in drift["ftext"], drift
        assert drift["count"] == "2 models · 1 drifting", drift
        if "concept" in DriftReport.model_fields:
            assert "300" in drift["concept"] and "3" in drift["concept"], drift
        # rollouts per model: version, fraction, status, last reason (rollouts.v1)
        ro = await page.wait_for(
            """(() => { const m = document.querySelector('#rollouts .rollout-model[data-model="regime"]');
                        return m && {status: m.dataset.status, text: m.textContent,
                                     moves: m.querySelectorAll('tbody tr').length,
                                     count: document.getElementById('rollouts-count').textContent}; })()""",
            what="rollouts panel",
        )
        assert ro["status"] == "rolled_back" and "v-cand" in ro["text"] and "50%" in ro["text"], ro
        assert "matched_accuracy 0.412" in ro["text"] and ro["moves"] == 2, ro
        assert ro["count"] == "1 models · 0 under way", ro
        await page.eval("document.getElementById('load-panel').scrollIntoView()")
        shot = await page.call("Page.captureScreenshot", format="png")
        LOAD_ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
        LOAD_ARTIFACT.write_bytes(base64.b64decode(shot["data"]))
        await page.eval("window.scrollTo(0, 0)")

        # screenshot of the whole page as an operator sees it
        await page.eval("""(() => { const f = document.getElementById('node-filter');
                                     f.value = ''; f.dispatchEvent(new Event('input')); })()""")
        await page.wait_for("document.querySelectorAll('#nodes-rows .nrow').length > 10", what="node rows back")
        errors = page.page_errors()
        assert not errors, errors
        # the main thread stays responsive with NODES nodes: no update or frame anywhere near a freeze
        stats = await page.eval("window.__dashboard.stats")
        assert stats["maxApplyMs"] < 250, stats
        assert stats["maxRenderMs"] < 250, stats
        assert stats["maxLoadDriftMs"] < 50, stats  # the forecast and drift panels' share of a frame
        print(f"browser main-thread cost with {NODES} nodes: {stats}")
        shot = await page.call("Page.captureScreenshot", format="png")
        ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
        ARTIFACT.write_bytes(base64.b64decode(shot["data"]))
    assert ARTIFACT.stat().st_size > 20_000
    assert time.monotonic() - started < 90


def _post_otlp(trace_id: str, t0_ns: int) -> dict[str, str]:
    """Three spans of one decision's path to the real Jaeger (OTLP/HTTP JSON): features → regime → referee,
    each after a wait, the referee's linking the features span (fan-in). Returns name → span id."""
    import urllib.request
    import uuid

    from tests.integration.test_infra_jaeger_kube import OTLP_HTTP

    ids = {name: uuid.uuid4().hex[:16] for name in ("features", "regime", "referee")}
    layout = [  # service, name, start ms, duration ms, parent, link
        ("features", "features window", 0, 5, None, None),
        ("regime", "regime infer", 20, 3, "features", None),
        ("referee", "referee decide", 40, 2, "regime", "features"),
    ]
    resource_spans = []
    for service, name, start_ms, dur_ms, parent, link in layout:
        s: dict[str, Any] = {
            "traceId": trace_id, "spanId": ids[service], "name": name, "kind": 5,
            "startTimeUnixNano": str(t0_ns + start_ms * 1_000_000),
            "endTimeUnixNano": str(t0_ns + (start_ms + dur_ms) * 1_000_000),
            "attributes": [{"key": "borg.node", "value": {"stringValue": "node-7"}}],
        }
        if parent:
            s["parentSpanId"] = ids[parent]
        if link:
            s["links"] = [{"traceId": trace_id, "spanId": ids[link]}]
        resource_spans.append({"resource": {"attributes": [{"key": "service.name",
                                                            "value": {"stringValue": service}}]},
                               "scopeSpans": [{"scope": {"name": "tests"}, "spans": [s]}]})
    request = urllib.request.Request(OTLP_HTTP, data=json.dumps({"resourceSpans": resource_spans}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200
    return ids


@pytest.mark.jaeger
async def test_decision_trace_page_draws_the_waterfall_from_jaeger(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    from tests.integration.test_infra_jaeger_kube import JAEGER_SH, start

    start(JAEGER_SH)
    traffic = await replay_traffic(kafka_bootstrap, topic_prefix, nodes=20, rounds=2)
    trace_id = traffic.decisions["d-web"].trace_id
    assert trace_id
    ids = _post_otlp(trace_id, time.time_ns() - 60_000_000_000)
    settings = settings_for(topic_prefix, port=free_port(), history_minutes=1)
    async with running_dashboard(settings) as base, chromium(tmp_path) as page:
        async with aiohttp.ClientSession() as http:
            async def trace_served() -> dict[str, Any] | None:
                async with http.get(f"{base}/api/trace/d-web") as r:
                    body: dict[str, Any] = await r.json() if r.status == 200 else {}
                    return body if len(body.get("spans", [])) == 3 else None

            view = await wait_until(trace_served, timeout=60, interval=0.5, what="the decision's trace via /api/trace")
        assert [s["service"] for s in view["spans"]] == ["features", "regime", "referee"]
        assert [s["depth"] for s in view["spans"]] == [0, 1, 2]
        assert view["spans"][2]["links"] == [{"trace_id": trace_id, "span_id": ids["features"]}]
        # the decision row links here, and Jaeger's own UI beside it
        await page.call("Page.navigate", url=f"{base}/")
        links = await page.wait_for(
            """(() => { const row = document.querySelector('[data-decision-id="d-web"]');
                       return row && row.querySelector('a.trace')
                         ? [row.querySelector('a.trace').href, row.querySelector('a.jaeger').href] : null; })()""",
            what="decision d-web's trace links",
        )
        assert links == [f"{base}/trace/d-web", f"http://127.0.0.1:16686/trace/{trace_id}"]
        await page.call("Page.navigate", url=f"{base}/trace/d-web")
        rows = await page.wait_for(
            """(() => { const rows = [...document.querySelectorAll('.span-row')];
                       return rows.length === 3 ? rows.map(r => ({service: r.dataset.service,
                         wait: Number(r.dataset.waitUs), gap: !!r.querySelector('.gap'),
                         link: r.querySelectorAll('a.link').length})) : null; })()""",
            what="the waterfall's three rows",
        )
        assert [r["service"] for r in rows] == ["features", "regime", "referee"]
        # 15 ms between features' end and regime's start, 17 ms before the referee: drawn as waits
        assert [r["wait"] for r in rows] == [0, 15_000, 17_000] and [r["gap"] for r in rows] == [False, True, True]
        assert [r["link"] for r in rows] == [0, 0, 1]
        await page.eval("document.querySelector('.span-row').click()")
        shown = await page.eval("!document.querySelector('.span-row .span-attrs').hidden")
        assert shown is True
        assert not page.page_errors(), page.page_errors()
