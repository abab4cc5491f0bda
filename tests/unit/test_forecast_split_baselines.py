"""Forecast training pieces: VM split, baselines and metrics on hand-computed series."""

from __future__ import annotations

import numpy as np
import pytest

from featurelib.load_features import DAY, HORIZON_STEPS, LOAD_FEATURE_INDEX, N_LOAD_FEATURES, STEP_S
from training.forecast.bitbrains import Series
from training.forecast.dataset import BASELINES, Points, baseline, series_points
from training.forecast.metrics import case_name, score, wape
from training.forecast.train import split_vms


def test_split_has_no_vm_overlap_and_is_seeded() -> None:
    names = [str(i) for i in range(1, 101)]
    train, held = split_vms(names, 0.2, seed=0)
    assert not set(train) & set(held)
    assert sorted(train + held) == sorted(names)
    assert len(held) == 20
    assert split_vms(names, 0.2, seed=0) == (train, held)
    assert split_vms(names, 0.2, seed=1)[1] != held
    assert split_vms(["a", "b"], 0.01, seed=3)[1]  # always at least one held out
    assert split_vms(["a", "b"], 0.99, seed=3)[0]  # and one trained on


def _points(last: list[float], mean_1h: list[float], day_h: list[float], y: list[float], h: int = 0) -> Points:
    n = len(last)
    x = np.full((n, N_LOAD_FEATURES), np.nan, dtype=np.float32)
    x[:, LOAD_FEATURE_INDEX["cpu_last"]] = last
    x[:, LOAD_FEATURE_INDEX["cpu_mean_1h"]] = mean_1h
    x[:, LOAD_FEATURE_INDEX[f"cpu_day_h{HORIZON_STEPS[h]}"]] = day_h
    x[:, LOAD_FEATURE_INDEX["mem_last"]] = 1.0
    ys = np.full((n, 2, len(HORIZON_STEPS)), np.nan)
    ys[:, 0, h] = y
    return Points(x, ys, np.arange(n, dtype=np.int64) * STEP_S + 10_000, np.zeros(n, np.int32), ("vm",))


def test_baselines_hand_computed() -> None:
    pts = _points(last=[10, 20], mean_1h=[12, 18], day_h=[30, float("nan")], y=[11, 25])
    assert baseline(pts.x, "persistence", 0, 0).tolist() == [10, 20]
    assert baseline(pts.x, "moving_average_1h", 0, 0).tolist() == [12, 18]
    assert baseline(pts.x, "seasonal_naive", 0, 0).tolist() == [30, 20]  # empty yesterday -> persistence


def test_score_hand_computed() -> None:
    pts = _points(last=[10, 20], mean_1h=[12, 18], day_h=[30, float("nan")], y=[11, 25])

    def forecast(r: int, h: int, q: float, x: np.ndarray) -> np.ndarray:
        return np.array([11.0, 23.0]) if q == 0.5 else np.array([12.0, 24.0])

    cases = score(pts, after_s=0, forecast=forecast)
    m = cases[case_name(0, 0)]
    assert case_name(0, 0) == "cpu 5min"
    assert m["points"] == 2
    assert m["wape"] == pytest.approx(2 / 36)
    assert m["one_minus_wape"] == pytest.approx(1 - 2 / 36)
    assert m["mae"] == pytest.approx(1.0)
    assert m["p90_coverage"] == pytest.approx(0.5)  # 11 <= 12, 25 > 24
    assert m["wape_persistence"] == pytest.approx(6 / 36)
    assert m["wape_moving_average_1h"] == pytest.approx(8 / 36)
    assert m["wape_seasonal_naive"] == pytest.approx(24 / 36)
    assert m["best_baseline"] == "persistence"
    assert m["ratio_to_best_baseline"] == pytest.approx(2 / 6)
    assert m["target_met"] is True
    assert set(BASELINES) == {"persistence", "moving_average_1h", "seasonal_naive"}
    # only targets after `after_s` count
    later = score(pts, after_s=int(pts.target_s(0)[0]), forecast=forecast)[case_name(0, 0)]
    assert later["points"] == 1


def test_wape_of_zero_actuals_is_undefined() -> None:
    assert wape(np.zeros(3), np.ones(3)) is None


def test_series_points_targets_are_later_buckets() -> None:
    n = DAY + 10
    t = 1_000_000_200 + np.arange(n) * 300
    cpu = np.arange(n, dtype=float) % 100
    series = Series("vm", t.astype(np.int64), cpu, np.full(n, 40.0), ())
    x, y, now_s = series_points(series)
    i = 5
    assert x[i, LOAD_FEATURE_INDEX["cpu_last"]] == cpu[i]
    for h, s in enumerate(HORIZON_STEPS):
        assert y[i, 0, h] == cpu[i + s]
    assert np.isnan(y[-1, 0, 0])  # no bucket after the last
    assert now_s[i] % STEP_S == 0
    assert now_s[i] > t[i] >= now_s[i] - STEP_S


def test_fingerprint_tells_idle_vms_apart() -> None:
    """Idle VMs share timestamps and zero CPU; their memory still tells them apart (a real clash, fixed)."""
    from training.forecast.train import series_fingerprint

    t = np.arange(2000, dtype=np.int64) * 300
    idle = np.zeros(2000)
    a = Series("a", t, idle, np.full(2000, 10.0), ())
    b = Series("b", t, idle, np.r_[np.full(1999, 10.0), 11.0], ())
    assert series_fingerprint(a) != series_fingerprint(b)
    assert series_fingerprint(a) == series_fingerprint(Series("renamed", t, idle.copy(), np.full(2000, 10.0), ()))
