"""Cost of the dashboard's forecast-vs-actual rows (docs/dashboard.md): aggregation per sample, snapshot, diff.

``python -m loadtests.bench_dashboard_load [--nodes 1000]``: feeds ``DashboardState`` 13 buckets of 30 samples
(one per 10 s vector) and one forecast per node and bucket, then times a full snapshot (charts built, then
cached) and measures a diff after one more sample per node. No broker: decode cost is not included.
"""

from __future__ import annotations

import argparse
import time

import orjson

from contracts.models import LoadForecast, LoadQuantiles
from contracts.topics import FORECASTS_TOPIC
from services.dashboard.load import BUCKET_MS, HORIZONS_S
from services.dashboard.state import DashboardState, StateConfig

B0 = 5_666_666 * BUCKET_MS


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1000)
    n_nodes = p.parse_args().nodes
    state = DashboardState(StateConfig())
    quantiles = [LoadQuantiles(horizon_s=h, resource=r, p50=0.3, p90=0.4)  # type: ignore[arg-type]
                 for h in HORIZONS_S for r in ("cpu", "memory")]
    samples = 0
    started = time.process_time()
    for k in range(13):
        end = B0 + k * BUCKET_MS
        for i in range(n_nodes):
            node = f"node-{i:05d}"
            for j in range(30):
                state.load.observe(node, (end - BUCKET_MS) / 1000 + 5 + j * 10, 0.3, 0.5, end, state.version + 1)
                state.version += 1
                samples += 1
            state.apply(FORECASTS_TOPIC, LoadForecast(
                node=node, ts_ms=end + 1000, window_end_ms=end, status="ok", history_buckets=100,
                quantiles=quantiles, model_version="bench", input_ts_ms=end))
    spent = time.process_time() - started
    print(f"{samples:,} samples + {13 * n_nodes:,} forecasts: {spent:.2f} s CPU, "
          f"{spent / samples * 1e6:.1f} us per sample (forecasts included)")
    for label in ("full snapshot", "again, charts cached"):
        started = time.process_time()
        body = orjson.dumps(state.snapshot(B0))
        print(f"{label}: {len(body) / 1e6:.2f} MB, {time.process_time() - started:.3f} s CPU")
    since = state.version
    for i in range(n_nodes):
        state.load.observe(f"node-{i:05d}", (B0 + 11 * BUCKET_MS) / 1000 + 299, 0.3, 0.5, B0, state.version + 1)
        state.version += 1
    diff = orjson.dumps(state.snapshot(B0, since=since))
    print(f"diff after one sample per node (same bucket): {len(diff) / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
