"""The arena report's forecast section: node load → 5-minute buckets → the stage's inputs → WAPE on equal points."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from featurelib.load_features import LOAD_FEATURE_INDEX, STEP_S
from simulator.arena import forecast

TICK_S = 10.0
TICKS_PER_BUCKET = int(STEP_S / TICK_S)


@dataclass(frozen=True)
class Head:
    resource: str
    horizon_s: int
    quantile: float


class LastValueModel:
    """A stand-in forecaster answering the node's last bucket (the ``cpu_last``/``mem_last`` input) + `offset`."""

    version = "last-value"

    def __init__(self, offset: float = 0.0) -> None:
        self.offset = offset
        self.heads = tuple(Head(r, h, q) for h in (300, 900, 1800) for r in ("cpu", "memory") for q in (0.5, 0.9))

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, ...]:
        col = {"cpu": LOAD_FEATURE_INDEX["cpu_last"], "memory": LOAD_FEATURE_INDEX["mem_last"]}
        return tuple(x[:, col[h.resource]].astype(np.float64) + self.offset + (5.0 if h.quantile == 0.9 else 0.0)
                     for h in self.heads)


def load(buckets: int, nodes: int = 3) -> np.ndarray:
    """(ticks, nodes, 2): node i's CPU steps every bucket through a seeded pattern, memory a slow ramp."""
    rng = np.random.default_rng(4)
    levels = rng.uniform(0.1, 0.9, size=(buckets, nodes))
    cpu = np.repeat(levels, TICKS_PER_BUCKET, axis=0)
    mem = np.repeat(np.linspace(0.2, 0.6, buckets)[:, None] * np.ones((1, nodes)), TICKS_PER_BUCKET, axis=0)
    return np.stack([cpu, mem], axis=2)


def test_persistence_wape_is_computed_on_the_bucket_means() -> None:
    node_load = load(20)
    out = forecast.evaluate(node_load, TICK_S, None, min_history=1)
    levels = node_load[::TICKS_PER_BUCKET, :, 0] * 100
    # every closed bucket k (the last one is open: 19 closed) with a closed target k + 1
    y, p = levels[1:19], levels[0:18]
    case = out["scores"]["cpu 5min"]
    assert case["points"] == 18 * 3
    assert case["wape_persistence"] == pytest.approx(np.abs(y - p).sum() / y.sum())
    assert "wape_model" not in case and out["model_version"] is None


def test_model_gets_the_stage_inputs_at_the_scored_bucket() -> None:
    # a model answering the last bucket is persistence exactly: the inputs line up with the points
    out = forecast.evaluate(load(30), TICK_S, LastValueModel(), min_history=12)
    for name, case in out["scores"].items():
        assert case["points"] > 0, name
        assert case["wape_model"] == pytest.approx(case["wape_persistence"], rel=1e-6), name
        assert case["p90_coverage"] is not None
    assert out["scores"]["cpu 30min"]["points"] < out["scores"]["cpu 5min"]["points"]  # targets past the end
    worse = forecast.evaluate(load(30), TICK_S, LastValueModel(offset=10.0), min_history=12)
    assert worse["scores"]["cpu 5min"]["wape_model"] > out["scores"]["cpu 5min"]["wape_model"]
    assert worse["scores"]["cpu 5min"]["ratio_to_best_baseline"] > 1


def test_history_rule_leaves_short_runs_unscored_and_missing_load_is_named() -> None:
    out = forecast.evaluate(load(12), TICK_S, LastValueModel(), min_history=12)
    assert all(case["points"] == 0 for case in out["scores"].values())
    assert forecast.evaluate(None, TICK_S)["skipped"] == "no per-node load recorded"


def test_shipped_model_loads_or_says_why(tmp_path: Path) -> None:
    model, why = forecast.load_model(tmp_path / "nowhere")
    assert model is None and why is not None and "not applied" in why
    root = Path(__file__).resolve().parents[2] / "models" / "forecast"
    assert (root / "CURRENT").is_file(), "the repository ships a forecast model (models/forecast/CURRENT)"
    model, why = forecast.load_model(root)
    assert model is not None and why is None
    out = forecast.evaluate(load(20), TICK_S, model, min_history=3)
    case = out["scores"]["cpu 5min"]
    assert case["points"] > 0 and case["wape_model"] is not None and 0 <= case["p90_coverage"] <= 1
