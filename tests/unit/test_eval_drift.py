"""The pure parts of ``borgctl eval drift`` (loadtests/eval_drift.py): the shift, the labels, the bench rows."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import orjson

from contracts import FeatureVector
from loadtests.eval_drift import BAD, Plan, bench_rows, labels_of, make_bad, model_root, record
from simulator import holdout_split


def test_shifted_nodes_run_only_held_out_kinds_after_the_shift_and_the_others_never_do() -> None:
    plan = Plan(nodes=6, shift_at=40, retrain_at=60, ticks=80)
    rec = record(plan)
    train, held = holdout_split(per_class=1, seed=7)
    assert rec.shifted == {"sim-0000", "sim-0002", "sim-0004"}
    assert len(rec.truth) == plan.nodes * plan.ticks
    for r in rec.truth:
        kinds = set(r["co_runners"])
        if r["node"] in rec.shifted and r["ts_ms"] >= plan.shift_ms:
            assert kinds <= set(held), r
        else:
            assert kinds <= set(train), r
    stamps = [v.ts_ms for v in rec.vectors]
    assert stamps == sorted(stamps) and {v.node for v in rec.vectors} == {f"sim-{i:04d}" for i in range(6)}


def test_a_window_is_labelled_by_the_majority_of_its_last_pane() -> None:
    t0 = 1_700_000_000_000
    truth = [{"node": "a", "ts_ms": t0 + t, "regime": "llc" if t < 17_000 else "membw"} for t in range(0, 30_000, 1000)]

    def window(ts: int, node: str = "a") -> FeatureVector:
        return FeatureVector(node=node, ts_ms=t0 + ts, window_s=10, schema_hash="x" * 16, values=[0.0], valid=[True],
                             samples=10, input_ts_ms=t0 + ts)
    # [10 s, 20 s): 7 llc ticks, 3 membw; [20 s, 30 s): all membw; another node or no tick: no label
    assert labels_of([window(20_000), window(30_000), window(20_000, "b"), window(0)], truth) == [
        "llc", "membw", None, None]


def test_bench_rows_name_every_metric_and_a_missed_detection_is_nan() -> None:
    rows = bench_rows({"detection_delay_s": None, "before": {"accuracy": 0.1}, "after": {"accuracy": 0.5},
                       "bad_candidate_rolled_back": 1, "good_candidate_promoted": 0}, "quick")
    by = {r["metric"]: r for r in rows}
    assert {r["bench"] for r in rows} == {"drift"} and {r["case"] for r in rows} == {"quick"}
    assert math.isnan(by["detection_delay_s"]["value"])
    assert (by["accuracy_before"]["value"], by["accuracy_after"]["value"]) == (0.1, 0.5)
    assert (by["bad_candidate_rolled_back"]["value"], by["good_candidate_promoted"]["value"]) == (1.0, 0.0)


def test_the_bad_candidate_is_the_served_version_with_its_regime_names_reversed(tmp_path: Path) -> None:
    root, served = model_root(tmp_path)
    make_bad(root, served)
    good = orjson.loads((root / served / "model_card.json").read_bytes())
    bad = orjson.loads((root / BAD / "model_card.json").read_bytes())
    assert bad["version"] == BAD and bad["outputs"]["regimes"] == list(reversed(good["outputs"]["regimes"]))
    assert (root / "CURRENT").read_text().strip() == served
    shutil.rmtree(root)
