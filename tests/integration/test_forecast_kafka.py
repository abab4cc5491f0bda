"""Real Kafka, the real forecast process and the shipped model: per-node forecasts, unknowns, restored history.

Two nodes' FeatureVectors (two 10 s windows per 5-minute bucket) go to ``features.v1``: ``fc-long`` has
14 buckets, ``fc-new`` 3. On ``forecasts.v1`` (keyed by node) ``fc-long`` gets ``unknown``
(``insufficient_history``) until it has an hour of buckets and then quantiles at 5/15/30 min; ``fc-new``
only ``unknown``. The service is then stopped and started again: the next bucket of ``fc-long`` is
forecast from its restored history (the changelog), not from an empty one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts import FeatureVector
from contracts.base import Contract
from contracts.models import LoadForecast
from contracts.topics import FORECASTS_TOPIC
from featurelib.load_features import HOUR, STEP_S
from featurelib.load_serving import CPU_COLUMN, MEM_COLUMN
from featurelib.node.schema import N_FEATURES, node_feature_schema_hash
from tests.integration.test_stream_pipeline import collector, running, spawn, wait_ready
from tests.kafka_helpers import produce_contracts

pytestmark = [pytest.mark.integration]

LONG, NEW = "fc-long", "fc-new"
B0 = 1_790_000_100 // STEP_S  # first bucket


def windows(node: str, buckets: range, cpu: float = 0.3, mem: float = 0.5) -> list[tuple[str, Contract]]:
    out: list[tuple[str, Contract]] = []
    for k in buckets:
        for end_s in ((k * STEP_S) + 100, (k * STEP_S) + 200):
            values = [0.5] * N_FEATURES
            values[CPU_COLUMN], values[MEM_COLUMN] = cpu, mem
            out.append((node, FeatureVector(node=node, ts_ms=end_s * 1000, window_s=10,
                                            schema_hash=node_feature_schema_hash(), values=values,
                                            valid=[True] * N_FEATURES, samples=10, input_ts_ms=end_s * 1000 - 5)))
    return out


async def test_forecast_stage_publishes_per_node_and_restores_history(kafka_bootstrap: str, topic_prefix: str,
                                                                      tmp_path: Path) -> None:
    first = [*windows(LONG, range(B0, B0 + 14)), *windows(NEW, range(B0, B0 + 3))]
    service = spawn("forecast", kafka_bootstrap, topic_prefix, tmp_path)
    with running(service):
        await wait_ready((service,))
        async with collector(kafka_bootstrap, topic_prefix, [FORECASTS_TOPIC]) as (got, poll_until):
            await produce_contracts(kafka_bootstrap, topic_prefix, "features.v1", first)
            # a bucket closes on the node's first vector of the next one: 13 + 2 records
            await poll_until(lambda g: len(g.values(FORECASTS_TOPIC, LoadForecast)) >= 15, 60, "15 forecasts")
    records = got.values(FORECASTS_TOPIC, LoadForecast)
    long = [r for r in records if r.node == LONG]
    new = [r for r in records if r.node == NEW]
    assert len(long) == 13 and len(new) == 2
    assert [r.window_end_ms for r in long] == [(B0 + i + 1) * STEP_S * 1000 for i in range(13)]
    assert all(r.status == "unknown" and r.reason == "insufficient_history" for r in new + long[: HOUR - 1])
    ok = long[HOUR - 1:]
    assert ok and all(r.status == "ok" for r in ok)
    for r in ok:
        assert len(r.quantiles) == 6 and all(0 <= q.p50 <= q.p90 <= 1 for q in r.quantiles)
        assert abs(r.quantiles[0].p50 - 0.3) < 0.05  # a flat 30 % CPU node stays near 30 %

    # restart: the history comes back from the changelog, so the next bucket is forecast at once
    END = (B0 + 15) * STEP_S * 1000  # noqa: N806
    again = spawn("forecast", kafka_bootstrap, topic_prefix, tmp_path)
    with running(again):
        await wait_ready((again,))
        async with collector(kafka_bootstrap, topic_prefix, [FORECASTS_TOPIC]) as (got2, poll_until2):
            await produce_contracts(kafka_bootstrap, topic_prefix, "features.v1",
                                    windows(LONG, range(B0 + 14, B0 + 16)))
            await poll_until2(lambda g: any(r.window_end_ms == END for r in g.values(FORECASTS_TOPIC, LoadForecast)),
                              60, "forecast after restart")
    after = [r for r in got2.values(FORECASTS_TOPIC, LoadForecast) if r.window_end_ms == END]
    assert after[-1].status == "ok" and after[-1].history_buckets >= 14
