"""`borgctl load ramp` end to end on the real broker with whatever stream services this build has."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration


def run_load(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    # Stage throughput comes from committed offsets. The tiny ramp's 4 s windows cannot resolve
    # features' default 5 s commits (the last window is interpolated across the step before), so
    # its services commit every second, as a ramp with windows of several commit intervals sees.
    env = {**os.environ, "STREAM_COMMIT_INTERVAL_S": "1"}
    return subprocess.run(
        [sys.executable, "-m", "borgctl.main", "load", *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False, env=env,
    )


@pytest.mark.timeout(120)
def test_tiny_ramp_writes_results_and_a_missed_threshold_exits_1(kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "ramp"
    done = run_load(
        ["ramp", "--steps", "200,500", "--hold", "6", "--warmup", "4", "--out", str(out), "--services", "stream",
         "--bootstrap", kafka_bootstrap, "--min-throughput-ratio", "5", "--ready-timeout", "60"],
        timeout=110,
    )
    assert done.returncode == 1, done.stderr
    assert "MISSED step 200/s" in done.stderr
    doc = orjson.loads((out / "results.json").read_bytes())
    assert set(doc) == {"machine", "results"}
    assert doc["machine"]["cpus"] >= 1
    rows = doc["results"]
    for row in rows:
        assert {"bench", "case", "metric", "value", "unit"} <= set(row)
        assert row["bench"] == "pipeline"
        assert isinstance(row["value"], int | float)
    by = {(r["case"], r["metric"], r.get("offered")): r["value"] for r in rows}
    for offered in (200.0, 500.0):
        assert by[("ramp:load", "sent", offered)] == pytest.approx(offered, rel=0.2)
        assert ("ramp:pipeline", "throughput", offered) in by
        assert ("ramp:deadletter", "dead_letters", offered) in by
        assert ("ramp:proc:runner", "cpu", offered) in by
    timeline = orjson.loads((out / "timeline.json").read_bytes())
    if "features" in timeline["services"]:
        assert by[("ramp:stage:features", "throughput", 500.0)] == pytest.approx(500, rel=0.35)
        assert ("ramp:e2e", "latency_p99", 500.0) in by
    for png in ("throughput.png", "latency_p99.png", "lag.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    assert timeline["exit_codes"] and all(code is not None for code in timeline["exit_codes"].values())
