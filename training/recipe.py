"""The failure-model training recipe for one horizon: rows, weights, XGBoost, isotonic calibration.

Shared by ``train.py`` (the shipped model) and ``rolling.py`` (the same recipe retrained per
rolling-origin fold), so the rolling figures describe what is shipped.

Within the training window ``[first, train_end)``: the model is fitted on the earlier part
(points whose label window closes before the tail starts), early-stopped on the later tail,
and the tail's scores then fit the calibration map -- always on data later than any row the
model was fitted on. There is no refit on the tail (the calibration would no longer be fitted
on unseen, later data).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import numpy as np
import xgboost as xgb

from featurelib.task_features import TASK_FEATURE_NAMES
from training.calibration import Calibration, fit_isotonic
from training.dataset import FailureDataset
from training.failure_model import DEFAULT_PARAMS
from training.progress import Progress

TIME_FEATURES: Final = ("task_age_s", "job_age_s", "job_tasks_seen", "job_submits", "job_finishes",
                        "job_evicts", "job_kills", "job_fails", "task_submits", "task_updates")
"""Features whose value grows with how much of the trace lies behind ``now`` (cumulative
counts and ages): a later window (whose history restarts) sees other ranges than training.
Dropping them was measured (``Recipe(dropped=TIME_FEATURES)``) and cost 0.02-0.04 of the
ratio to the best baseline on later hours: the cold-start views already teach the trees
what restarted counts look like, so they are kept."""

PARAMS: Final[dict[str, Any]] = dict(DEFAULT_PARAMS)
"""Depth 6, boosted forests of 4 trees per round on half-samples (training/failure_model.py). In the
rolling-origin folds depth-4 trees (with TIME_FEATURES dropped), dropping ``TIME_FEATURES`` and recency weighting
all did as well or slightly worse on later hours (training/README.md)."""


@dataclass(frozen=True, slots=True)
class Recipe:
    params: dict[str, Any] = field(default_factory=lambda: dict(PARAMS))
    dropped: tuple[str, ...] = ()
    """Columns the trees never see (set to NaN before fitting: XGBoost cannot split on them)."""
    max_rounds: int = 400
    min_rounds: int = 30
    early_stopping_rounds: int = 30
    fallback_rounds: int = 80
    min_tail_positives: int = 10
    tail_fraction: float = 0.25
    negative_rate: float = 0.1
    recency_half_life_us: int | None = None
    """Weight rows by 0.5 ** (age at the end of training / half-life); None: equal weights."""
    cold_views: int = 3
    cold_span_us: int = 3 * 3_600_000_000

    def describe(self) -> dict[str, Any]:
        return asdict(self)

    def keep_mask(self) -> np.ndarray:
        return np.array([n not in self.dropped for n in TASK_FEATURE_NAMES])


ViewSource = Callable[[int, int], FailureDataset]
"""``(lo_us, hi_us) -> dataset of points in [lo, hi)`` with history from one warm-up before ``lo``."""


@dataclass(frozen=True, slots=True)
class FittedRecipe:
    booster: xgb.Booster
    keep: np.ndarray
    calibration: Calibration | None
    rounds: int
    best_tail_round: int | None
    tail_aucpr: float | None
    rows: dict[str, int]

    def raw(self, x: np.ndarray) -> np.ndarray:
        """Uncalibrated scores (what the ONNX file computes; dropped columns are ignored by the trees)."""
        return np.asarray(self.booster.predict(xgb.DMatrix(mask_dropped(x, self.keep))), dtype=np.float64)

    def predict(self, x: np.ndarray) -> np.ndarray:
        p = self.raw(x)
        return p if self.calibration is None else self.calibration.apply(p)


def mask_dropped(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    out = np.array(x, dtype=np.float32, copy=True)
    out[:, ~keep] = np.nan
    return out


def _cold_rows(recipe: Recipe, views: ViewSource | None, first_us: int, train_end_us: int, before_us: int,
               horizon_us: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of ``recipe.cold_views`` late-start views inside the training window, ``now < before_us``."""
    xs, ys, ts = [np.zeros((0, len(TASK_FEATURE_NAMES)), np.float32)], [np.zeros(0)], [np.zeros(0, np.int64)]
    if views is None:
        return xs[0], ys[0], ts[0]
    for k in range(1, recipe.cold_views + 1):
        cut = first_us + k * (train_end_us - first_us) // (recipe.cold_views + 1)
        lo = cut + 3_600_000_000
        hi = min(lo + recipe.cold_span_us, train_end_us)
        if lo >= hi:
            continue
        ds = views(lo, hi)
        y, t = ds.labels(horizon_us), ds.times()
        keep = ~np.isnan(y) & (t < before_us)
        xs.append(ds.features(keep))
        ys.append(y[keep])
        ts.append(t[keep])
    return np.vstack(xs), np.concatenate(ys), np.concatenate(ts)


def _weights(recipe: Recipe, y: np.ndarray, t: np.ndarray, end_us: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(row selection, weights): every positive, a seeded share of negatives weighted 1/rate, times recency."""
    keep = (y == 1) | (np.random.default_rng(seed).random(len(y)) < recipe.negative_rate)
    w = np.where(y[keep] == 1, 1.0, 1.0 / recipe.negative_rate)
    if recipe.recency_half_life_us:
        w = w * np.power(0.5, (end_us - t[keep]) / recipe.recency_half_life_us)
    return keep, w


def fit_recipe(recipe: Recipe, warm: FailureDataset, train: np.ndarray, train_end_us: int, horizon_us: int,
               views: ViewSource | None, seed: int, progress: Progress, label: str) -> FittedRecipe:
    """Fit on the earlier part of the rows in ``train`` (+ cold views), early-stop and calibrate on the tail."""
    t_all = warm.times()
    first = int(t_all.min())
    tail_start = first + int((train_end_us - first) * (1.0 - recipe.tail_fraction))
    fit_before = tail_start - horizon_us  # every fitted label window closes before the tail starts
    y_all = warm.labels(horizon_us)
    known = ~np.isnan(y_all)
    fit = train & known & (t_all < fit_before)
    tail = train & known & (t_all >= tail_start) & (t_all < train_end_us)
    keep_cols = recipe.keep_mask()
    xc, yc, tc = _cold_rows(recipe, views, first, train_end_us, fit_before, horizon_us)
    x_fit = mask_dropped(np.vstack([warm.features(fit), xc]), keep_cols)
    y_fit = np.concatenate([y_all[fit], yc])
    t_fit = np.concatenate([t_all[fit], tc])
    sel, w = _weights(recipe, y_fit, t_fit, fit_before, seed)
    dfit = xgb.DMatrix(x_fit[sel], label=y_fit[sel], weight=w)
    x_tail, y_tail = mask_dropped(warm.features(tail), keep_cols), y_all[tail]
    params = {**recipe.params, "seed": seed}
    rows = {"fit": int(sel.sum()), "fit_unsampled": len(y_fit), "cold_view_rows": len(yc), "tail": len(y_tail),
            "fit_positives": int(y_fit.sum()), "tail_positives": int(y_tail.sum())}
    if int(y_tail.sum()) >= recipe.min_tail_positives and int(y_fit.sum()) > 0:
        dtail = xgb.DMatrix(x_tail, label=y_tail)
        booster = xgb.train(params, dfit, recipe.max_rounds, evals=[(dtail, "tail")],
                            early_stopping_rounds=recipe.early_stopping_rounds, verbose_eval=False)
        best: int | None = booster.best_iteration + 1
        rounds = min(max(best or 0, recipe.min_rounds), booster.num_boosted_rounds())
        booster = booster[:rounds]
        tail_prob = np.asarray(booster.predict(dtail), dtype=np.float64)
        calibration: Calibration | None = fit_isotonic(tail_prob, y_tail)
        from training.metrics import ranking_metrics

        tail_aucpr = ranking_metrics(y_tail, tail_prob)["aucpr"]
    else:
        best, rounds, tail_aucpr, calibration = None, recipe.fallback_rounds, None, None
        booster = xgb.train(params, dfit, rounds, verbose_eval=False)
    progress(f"{label}: {rounds} rounds on {rows['fit']:,} rows ({rows['fit_positives']} positives, "
             f"{rows['cold_view_rows']:,} cold-view rows); tail {rows['tail']:,} rows, "
             f"{rows['tail_positives']} positives, AUCPR {tail_aucpr if tail_aucpr is None else round(tail_aucpr, 4)}")
    return FittedRecipe(booster, keep_cols, calibration, rounds, best, tail_aucpr, rows)
