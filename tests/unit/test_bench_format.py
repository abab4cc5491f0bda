"""`borgctl bench` writes the one result format (machine + rows with bench/case/metric/value/unit)."""

from __future__ import annotations

from pathlib import Path

import orjson

from loadtests.bench import main
from loadtests.bench_format import percentile


def test_inference_bench_writes_the_common_format(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    assert main(["inference", "--quick", "--out", str(out)]) == 0
    doc = orjson.loads(out.read_bytes())
    assert doc["machine"]["cpus"] >= 1
    assert doc["machine"]["python"].count(".") == 2
    assert doc["machine"]["commit"]
    rows = doc["results"]
    assert {r["bench"] for r in rows} == {"inference"}
    for row in rows:
        assert set(row) <= {"bench", "case", "offered", "metric", "value", "unit"}
        assert row["unit"] in {"ms", "rows/s"}
        assert row["value"] > 0
    single = {r["case"]: r["value"] for r in rows if r["metric"] == "latency_p50" and r["offered"] == 1}
    # onnxruntime is the per-message path: it must beat native XGBoost on one row.
    assert single["onnxruntime rows=1"] < single["xgboost rows=1"]


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) in (50.0, 51.0)
    assert percentile(values, 99) == 99.0
    assert percentile([3.0], 99) == 3.0
