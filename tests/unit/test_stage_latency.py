"""borg_stage_latency_seconds: batch counting into buckets, exemplars, and the OpenMetrics exposition."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from contracts.headers import trace_id_of
from services.runtime.latency import BUCKETS, StageLatency

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def samples(latency: StageLatency) -> dict[tuple[str, str], float]:
    """(sample name, le) → value of the one series in ``latency``."""
    (family,) = list(latency.collect())
    return {(s.name, s.labels.get("le", "")): s.value for s in family.samples}


def test_a_batch_lands_in_its_buckets_cumulatively_with_the_sum() -> None:
    latency = StageLatency()
    now = 1_000_000.0
    # latencies 3 ms, 10 ms (on a bound: le counts it), 200 ms, 61 s (above every bound)
    latency.observe("features", "nodestate.v1", [int(now - 3), int(now - 10), int(now - 200), int(now - 61_000)], now)
    got = samples(latency)
    assert got[("borg_stage_latency_seconds_bucket", "0.005")] == 1
    assert got[("borg_stage_latency_seconds_bucket", "0.01")] == 2
    assert got[("borg_stage_latency_seconds_bucket", "0.25")] == 3
    assert got[("borg_stage_latency_seconds_bucket", "60.0")] == 3
    assert got[("borg_stage_latency_seconds_bucket", "+Inf")] == 4
    assert got[("borg_stage_latency_seconds_count", "")] == 4
    assert abs(got[("borg_stage_latency_seconds_sum", "")] - (0.003 + 0.010 + 0.200 + 61.0)) < 1e-9
    # a second batch adds up; a timestamp in the future (clock skew) counts as 0, not negative
    latency.observe("features", "nodestate.v1", [int(now + 50)], now)
    assert samples(latency)[("borg_stage_latency_seconds_bucket", "0.005")] == 2
    assert len(BUCKETS) + 3 == len(samples(latency))  # buckets + Inf, count, sum (gsum/gcount not used)


def test_series_per_service_and_topic_and_empty_batches_change_nothing() -> None:
    latency = StageLatency()
    latency.observe("risk", "features.v1", [1000], 1100)
    latency.observe("risk", "taskevents.v1", [1000, 1000], 1100)
    latency.observe("risk", "taskevents.v1", [], 1100)
    (family,) = list(latency.collect())
    counts = {(s.labels["service"], s.labels["topic"]): s.value for s in family.samples if s.name.endswith("_count")}
    assert counts == {("risk", "features.v1"): 1, ("risk", "taskevents.v1"): 2}


def test_the_slowest_record_is_the_exemplar_of_its_bucket_in_openmetrics() -> None:
    latency = StageLatency()
    latency.observe("regime", "features.v1", [9_700, 9_990], 10_000, slowest_trace_id=TRACE)  # worst: 300 ms
    registry = CollectorRegistry()
    registry.register(latency)  # type: ignore[arg-type]
    text = openmetrics_latest(registry).decode()  # type: ignore[no-untyped-call]
    bucket = next(line for line in text.splitlines() if 'le="0.5"' in line)
    assert f'# {{trace_id="{TRACE}"}} 0.3' in bucket, text
    assert "trace_id" not in next(line for line in text.splitlines() if 'le="0.25"' in line)


def test_trace_id_of_reads_w3c_traceparent_only() -> None:
    header = f"00-{TRACE}-00f067aa0ba902b7-01".encode()
    assert trace_id_of([("content-type", b"application/json"), ("traceparent", header)]) == TRACE
    assert trace_id_of([("traceparent", b"garbage")]) is None
    assert trace_id_of(None) is None


async def test_metrics_answers_openmetrics_with_exemplars_when_asked() -> None:
    from typing import Any

    from aiohttp.test_utils import TestClient, TestServer

    from services.runtime.health import HealthServer
    from services.runtime.latency import STAGE_LATENCY

    STAGE_LATENCY.observe("it-health", "nodestate.v1", [1_000], 1_020, slowest_trace_id=TRACE)
    client: TestClient[Any, Any] = TestClient(TestServer(HealthServer("127.0.0.1", 0).app))
    await client.start_server()
    try:
        plain = await client.get("/metrics")
        text = await plain.text()
        assert plain.headers["Content-Type"].startswith("text/plain")
        assert 'borg_stage_latency_seconds_count{service="it-health",topic="nodestate.v1"} 1.0' in text
        assert TRACE not in text  # the Prometheus text format has no exemplars
        open_metrics = await client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        assert open_metrics.headers["Content-Type"].startswith("application/openmetrics-text")
        body = await open_metrics.text()
        assert f'trace_id="{TRACE}"' in body and body.rstrip().endswith("# EOF")
    finally:
        await client.close()
