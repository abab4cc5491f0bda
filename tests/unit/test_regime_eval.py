"""``borgctl eval regime``: selective metrics on hand-computed arrays and a small end-to-end run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from training.regime.evaluate import eval_regime
from training.regime.selective import (
    answered_by_class_floors,
    class_confidence_floors,
    confidence_floor,
    risk_coverage,
    selective_metrics,
)

ROOT = Path(__file__).resolve().parents[2]


def test_selective_metrics_by_hand() -> None:
    truth = np.array([0, 1, 2, 0, 1])
    pred = np.array([0, 1, 0, 0, 2])
    answered = np.array([True, True, False, True, False])
    m = selective_metrics(truth, pred, answered, ("a", "b", "c"))
    assert m["accuracy"] == pytest.approx(3 / 5)
    assert m["coverage"] == pytest.approx(3 / 5)
    assert m["selective_accuracy"] == pytest.approx(1.0)
    assert m["recall"] == {"a": 1.0, "b": 0.5, "c": 0.0}
    assert m["selective_recall"] == {"a": 1.0, "b": 1.0, "c": None}
    assert m["coverage_by_class"] == {"a": 1.0, "b": 0.5, "c": 0.0}
    none = selective_metrics(truth, pred, np.zeros(5, dtype=bool), ("a", "b", "c"))
    assert none["coverage"] == 0.0 and none["selective_accuracy"] is None


def test_risk_coverage_ranks_hard_abstentions_last() -> None:
    correct = np.array([True, False, True, False])
    conf = np.array([0.9, 0.99, 0.6, 0.5])
    hard = np.array([False, True, False, False])  # the most confident window is out of distribution
    curve = risk_coverage(correct, conf, hard, points=4)
    assert curve["coverage"] == [0.25, 0.5, 0.75, 1.0]
    assert curve["selective_accuracy"] == pytest.approx([1.0, 1.0, 2 / 3, 0.5])
    assert curve["risk"] == pytest.approx([0.0, 0.0, 1 / 3, 0.5])


def test_confidence_floor_lowest_reaching_target_and_fallback() -> None:
    conf = np.array([0.95, 0.9, 0.8, 0.7, 0.6])
    correct = np.array([True, True, True, False, False])
    assert confidence_floor(conf, correct, target=0.9, min_answered=1) == (0.8, True)
    assert confidence_floor(conf, correct, target=0.75, min_answered=1) == (0.7, True)
    # ties stay together: a floor of 0.8 takes both 0.8 windows
    floor, met = confidence_floor(np.array([0.9, 0.8, 0.8]), np.array([True, True, False]), target=0.9,
                                  min_answered=1)
    assert (floor, met) == (0.9, True)
    # never reached: best selective accuracy among floors with enough windows, flagged
    assert confidence_floor(np.array([0.9, 0.8]), np.array([False, True]), target=0.9, min_answered=1) == (0.8, False)


def test_class_floors_are_calibrated_per_predicted_class_and_applied_to_the_top_class() -> None:
    # class 0 is reliable from 0.6 up, class 1 only from 0.9; class 2 is never predicted
    probs = np.array([[0.95, 0.05, 0.0], [0.7, 0.3, 0.0], [0.6, 0.4, 0.0],
                      [0.05, 0.95, 0.0], [0.3, 0.7, 0.0], [0.4, 0.6, 0.0]])
    truth = np.array([0, 0, 0, 1, 0, 0])
    floors, met = class_confidence_floors(probs, truth, target=0.9, min_answered=1)
    assert floors == [0.6, 0.95, 1.0] and met == [True, True, False]
    # one global floor reaching 0.9 would have had to drop class 0's answers at 0.7 and 0.6
    assert confidence_floor(probs.max(axis=1), probs.argmax(axis=1) == truth, target=0.9, min_answered=1) == \
        (0.95, True)
    assert answered_by_class_floors(probs, floors).tolist() == [True, True, True, True, False, False]
    assert answered_by_class_floors(np.array([[0.1, 0.2, 0.7]]), floors).tolist() == [False]


def test_eval_regime_small_cluster_writes_bench_json_and_png(tmp_path: Path) -> None:
    out = tmp_path / "eval.json"
    rc = eval_regime(["--model", str(ROOT / "models" / "regime"), "--nodes", "6", "--ticks", "300",
                      "--seed", "3", "--out", str(out), "-q"])
    assert rc == 0
    doc = orjson.loads(out.read_bytes())
    assert set(doc) >= {"machine", "results", "details"}
    rows = {r["metric"]: r for r in doc["results"]}
    for row in doc["results"]:
        assert set(row) == {"bench", "case", "metric", "value", "unit"}
        assert row["bench"] == "eval_regime" and row["case"] == "heldout_kinds_seed3"
    assert 0.0 < rows["coverage"]["value"] <= 1.0
    assert 0.0 <= rows["accuracy"]["value"] <= 1.0
    assert {"recall_none", "recall_llc", "recall_membw", "recall_core", "recall_mixed"} <= set(rows)
    summary = doc["details"]["heldout_kinds_seed3"]
    assert summary["windows"] == rows["windows"]["value"] > 0
    assert summary["coverage"] == pytest.approx(summary["answered"] / summary["windows"])
    assert out.with_suffix(".png").stat().st_size > 1000


def test_eval_regime_rejects_a_missing_model(tmp_path: Path) -> None:
    assert eval_regime(["--model", str(tmp_path), "--quick", "--out", str(tmp_path / "x.json"), "-q"]) == 2
