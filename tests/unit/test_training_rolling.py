"""Rolling-origin folds (no leakage, gaps respected), the calibration map and the input-range writer."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from featurelib.task_features import TASK_FEATURE_NAMES
from training.calibration import Calibration, fit_isotonic
from training.dataset import FailureDataset, build_dataset
from training.input_ranges import input_ranges
from training.progress import QUIET
from training.recipe import Recipe, fit_recipe
from training.rolling import (
    HOUR_US,
    RollingConfig,
    bench_rows,
    cold_view,
    repeat_split,
    rolling_evaluation,
    rolling_folds,
)
from training.synthetic_trace import SyntheticConfig, events_frame, generate

S = 1_000_000
HORIZONS = (300 * S, 900 * S, 3600 * S)
SMALL = Recipe(max_rounds=20, min_rounds=5, early_stopping_rounds=5, fallback_rounds=10, cold_views=1,
               cold_span_us=HOUR_US, params={**Recipe().params, "nthread": 1})


@pytest.mark.parametrize("gaps", [(0,), (0, 2 * HOUR_US, 4 * HOUR_US), (HOUR_US // 2, 3 * HOUR_US)])
def test_folds_test_strictly_after_every_training_label_and_respect_the_gap(gaps: tuple[int, ...]) -> None:
    first, last = HOUR_US, 14 * HOUR_US
    folds = rolling_folds(first, last, HOURS_1, origins=(0.4, 0.55, 0.7), gaps_us=gaps, test_span_us=2 * HOUR_US)
    assert folds, "a 13 h range holds at least one fold"
    times = np.arange(first, last, 60 * S)
    for f in folds:
        train, test = times[f.train_mask(times)], times[f.test_mask(times)]
        assert len(train) and len(test)
        # every training label window (now, now + max H] closes by the origin
        assert train.max() + HOURS_1 <= f.origin_us
        assert test.min() - f.origin_us >= f.gap_us and f.gap_us in gaps
        assert test.min() > train.max() + HOURS_1 - 1
        assert test.max() < f.test_end_us and f.test_end_us + HOURS_1 <= last  # every test label is known
    assert {f.gap_us for f in folds} <= set(gaps)
    assert len({f.origin_us for f in folds}) >= 2 or len(gaps) == 1


HOURS_1 = HOUR_US


def test_folds_that_do_not_fit_are_left_out_and_bad_arguments_refused() -> None:
    assert rolling_folds(0, 4 * HOUR_US, HOUR_US, origins=(0.5,), gaps_us=(5 * HOUR_US,), test_span_us=HOUR_US) == []
    with pytest.raises(ValueError):
        rolling_folds(0, 10 * HOUR_US, HOUR_US, origins=(1.2,), gaps_us=(0,), test_span_us=HOUR_US)
    with pytest.raises(ValueError):
        rolling_folds(0, 10 * HOUR_US, HOUR_US, origins=(0.5,), gaps_us=(-1,), test_span_us=HOUR_US)


def test_a_fold_fit_ignores_everything_at_or_after_its_origin() -> None:
    """Rewriting every event from the origin on (as if another future) leaves the fitted model unchanged."""
    trace = generate(SyntheticConfig(seed=5, duration_s=8 * 3600, n_jobs=300))
    events = events_frame(trace.task_events)
    origin = 6 * HOUR_US
    train_end = origin - max(HORIZONS)
    future = pl.col("time_us") >= origin
    other = events.with_columns(pl.when(future).then(pl.lit(3)).otherwise(pl.col("event_type"))
                                .cast(events.schema["event_type"]).alias("event_type"))
    probe = build_dataset(events, HORIZONS, (3,)).features()[:500]
    preds = []
    for ev in (events, other):
        warm = build_dataset(ev, HORIZONS, (3,))

        def views(lo: int, hi: int, ev: pl.DataFrame = ev) -> FailureDataset:
            return cold_view(ev, lo, hi, HORIZONS, (3,), RollingConfig().points, QUIET)

        fitted = fit_recipe(SMALL, warm, warm.times() < train_end, train_end, 900 * S, views,
                            seed=3, progress=QUIET, label="t")
        preds.append(fitted.predict(probe))
    assert np.array_equal(preds[0], preds[1])


def test_rolling_evaluation_reports_every_fold_and_bench_rows() -> None:
    trace = generate(SyntheticConfig(seed=2, duration_s=9 * 3600, n_jobs=300))
    events = events_frame(trace.task_events)
    cfg = RollingConfig(origins=(0.45,), gaps_us=(0, HOUR_US), test_span_us=HOUR_US)
    report = rolling_evaluation(events, SMALL, cfg, QUIET)
    assert [f["gap_h"] for f in report["folds"]] == [0.0, 1.0]
    for fold in report["folds"]:
        assert fold["test_h"][0] - fold["train_end_h"] >= 1.0 + fold["gap_h"]  # max horizon + gap
        assert set(fold["horizons"]) == {"300s", "900s", "3600s"}
        for m in fold["horizons"].values():
            assert m["n"] > 0 and m["best_baseline"] in m["baselines"]
        for m in fold["horizons"].values():
            split = m["repeat_split"]
            if split["ceiling_aucpr"] is not None and m["model"]["aucpr"] is not None:
                assert split["ceiling_aucpr"] >= m["model"]["aucpr"] - 1e-12  # only moves positives up, negatives down
    rows = bench_rows(report)
    assert rows and all(r["bench"] == "failure-rolling" and math.isfinite(r["value"]) for r in rows)
    assert {r["metric"] for r in rows} >= {"model_aucpr", "best_baseline_aucpr"}


def test_isotonic_calibration_is_strictly_increasing_maps_into_unit_interval_and_fixes_a_bias() -> None:
    rng = np.random.default_rng(0)
    score = rng.random(50_000)
    y = (rng.random(len(score)) < score**3).astype(float)  # the raw score overstates the risk
    cal = fit_isotonic(score, y)
    assert cal is not None
    assert np.all(np.diff(cal.x) > 0) and np.all(np.diff(cal.y) > 0) and len(cal.x) <= 66
    grid = np.linspace(-0.5, 1.5, 2001)
    out = cal.apply(grid)
    assert np.all((out >= 0) & (out <= 1)) and np.all(np.diff(out) >= 0)
    fresh = rng.random(50_000)
    y2 = (rng.random(len(fresh)) < fresh**3).astype(float)
    mask = (fresh > 0.4) & (fresh < 0.5)
    assert abs(cal.apply(fresh)[mask].mean() - y2[mask].mean()) < 0.02  # raw mean there is 0.45, truth ~0.08
    assert Calibration.from_card(cal.to_card()) == cal
    assert fit_isotonic(score, np.zeros(len(score))) is None


def test_calibration_keeps_the_ranking() -> None:
    rng = np.random.default_rng(1)
    score = rng.random(5_000) ** 4
    y = (rng.random(len(score)) < score).astype(float)
    cal = fit_isotonic(score, y)
    assert cal is not None
    order = np.argsort(score)
    assert np.all(np.diff(cal.apply(score[order])) >= 0)
    assert len(np.unique(cal.apply(score))) > 0.99 * len(np.unique(score))  # no ties introduced


def test_input_ranges_are_finite_percentiles_ignoring_nan_unused_and_unobserved_columns() -> None:
    names = TASK_FEATURE_NAMES[:4]
    x = np.full((10_000, 4), np.nan)
    x[:, 0] = np.arange(10_000)
    x[::2, 1] = 5.0
    x[:, 3] = np.linspace(-1, 1, 10_000)
    used = np.array([True, True, True, False])
    ranges = input_ranges(x, names, used)
    assert set(ranges) == {names[0], names[1]}  # column 2 never observed, column 3 not used
    lo, hi = ranges[names[0]]
    assert lo == pytest.approx(np.percentile(np.arange(10_000), 0.1)) and hi == pytest.approx(9989.001, rel=1e-6)
    assert ranges[names[1]] == [5.0, 5.0]
    assert all(math.isfinite(v) for pair in ranges.values() for v in pair)
    assert set(input_ranges(x, names)) == {names[0], names[1], names[3]}
    with pytest.raises(ValueError):
        input_ranges(x, names[:3])


def test_repeat_split_shares_and_ceiling_by_hand() -> None:
    # rows: two repeat (a positive scored low, a negative scored high), three first-failure rows
    y = np.array([1.0, 0.0, 1.0, 0.0, 0.0])
    model = np.array([0.1, 0.9, 0.8, 0.5, 0.2])
    repeat = np.array([True, True, False, False, False])
    split = repeat_split(y, model, {"aucpr": 0.4}, repeat, 0.5)
    assert split["rows_repeat"] == pytest.approx(0.4)
    assert split["positives_repeat_share"] == pytest.approx(0.5)
    assert split["first_failure_positive_rate"] == pytest.approx(1 / 3)
    assert split["model_aucpr_first_failure"] == pytest.approx(1.0)  # its positive is scored highest there
    # ceiling order: repeat positive, 0.8 (pos), 0.5, 0.2, repeat negative -> both positives on top
    assert split["ceiling_aucpr"] == pytest.approx(1.0)
    assert split["ceiling_ratio"] == pytest.approx(2.0)
    assert split["failed_before_aucpr"] == 0.4
    none = repeat_split(y, model, {"aucpr": None}, np.zeros(5, dtype=bool), None)
    assert none["rows_repeat"] == 0.0 and none["ceiling_ratio"] is None
    assert split["model_aucpr_repeat"] == pytest.approx(0.5)  # its positive ranked below its negative
    assert none["ceiling_aucpr"] == pytest.approx(0.45)  # no repeat rows: the model's own order (1/2 + 2/5) / 2
