"""`borgctl bench pipeline` end to end on the real broker: one short step, its rows and its progress lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_one_step_reports_every_row(kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "pipeline.json"
    env = {**os.environ, "KAFKA_BOOTSTRAP": kafka_bootstrap, "BENCH_PIPELINE_STEPS": "300",
           "BENCH_PIPELINE_STEP_S": "33", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "borgctl.main", "bench", "pipeline", "--no-reference",
                           "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=280,
                          check=False)
    assert done.returncode == 0, done.stderr
    progress = [line for line in done.stderr.splitlines() if "300 nodes: " in line]
    assert [line.split("300 nodes: ")[1].split(" s,")[0] for line in progress] == ["15/33", "30/33"], done.stderr
    assert "regime latency so far p50" in progress[-1]
    rows = {(r["case"], r["metric"]): r for r in orjson.loads(out.read_bytes())["results"]}
    step = "300 nodes @1Hz"
    assert rows[(step, "throughput")]["value"] == pytest.approx(300, rel=0.05)
    for metric in ("latency_p50", "latency_p99", "features_latency_p99", "anomaly_latency_p50",
                   "anomaly_latency_p99"):
        assert 0 < rows[(step, metric)]["value"] < 5000, metric
    over = rows[(step, "seconds_p99_over_target")]
    assert over["unit"] == "s" and over["value"].is_integer() and 0 <= over["value"] <= 33 - 12  # measured seconds
    cpu = {case.removeprefix(step + " ") for case, metric in rows if metric == "cpu_percent"}
    assert {"features#0", "features#1", "regime", "anomaly", "broker", "loadgen", "machine"} <= cpu  # 2 workers
    assert rows[("ceiling (highest step carried)", "throughput")]["value"] == 300.0
