"""XGBoost failure-risk model for one horizon, with time-ordered early stopping."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xgboost as xgb

Reporter = Callable[[str], None]

DEFAULT_PARAMS: Mapping[str, Any] = {
    "objective": "binary:logistic",
    "eval_metric": "aucpr",
    "tree_method": "hist",
    "max_depth": 6,
    "eta": 0.15,
    "min_child_weight": 10.0,
    "num_parallel_tree": 4,
    "subsample": 0.5,
    "colsample_bynode": 0.7,
    "reg_lambda": 5.0,
    "max_bin": 256,
    "nthread": 2,
}
"""Moderate depth; each round averages 4 trees on half-samples (boosted forest), which cut the
variance between seeds a lot in rolling time folds inside the training window; no class
re-weighting, so probabilities stay calibrated for the risk service."""


@dataclass(frozen=True, slots=True)
class FitConfig:
    max_rounds: int = 400
    early_stopping_rounds: int = 30
    min_rounds: int = 50
    """Floor on the early-stopped round count: the tail holds few failing jobs, so its optimum is noisy
    (time folds inside the training window did well with ~80 rounds at this learning rate)."""
    fallback_rounds: int = 80
    """Used when the tail has too few positives to early-stop on."""
    min_tail_positives: int = 10
    negative_rate: float = 0.1
    """Fraction of negative rows kept for fitting; kept negatives weigh 1/rate (probabilities stay unbiased)."""
    params: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_PARAMS))


@dataclass(frozen=True, slots=True)
class FittedModel:
    booster: xgb.Booster
    rounds: int
    best_tail_round: int | None
    early_stopping_aucpr: float


class _ProgressCallback(xgb.callback.TrainingCallback):
    def __init__(self, report: Reporter, label: str, every: int = 50) -> None:
        super().__init__()
        self._report, self._label, self._every = report, label, every

    def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
        if (epoch + 1) % self._every == 0:
            scores = evals_log.get("tail", {}).get("aucpr", [])
            tail = f", tail AUCPR {scores[-1]:.4f}" if scores else ""
            self._report(f"{self._label}: round {epoch + 1}{tail}")
        return False


def _sampled(x: np.ndarray, y: np.ndarray, rate: float, seed: int) -> xgb.DMatrix:
    """All positives, a seeded ``rate`` share of negatives weighted ``1/rate``."""
    if rate >= 1.0:
        return xgb.DMatrix(x, label=y)
    keep = (y == 1) | (np.random.default_rng(seed).random(len(y)) < rate)
    weight = np.where(y[keep] == 1, 1.0, 1.0 / rate)
    return xgb.DMatrix(x[keep], label=y[keep], weight=weight)


def fit_failure_model(x_fit: np.ndarray, y_fit: np.ndarray, x_tail: np.ndarray, y_tail: np.ndarray,
                      x_all: np.ndarray, y_all: np.ndarray, *, seed: int, config: FitConfig = FitConfig(),
                      progress: Reporter = lambda _: None, label: str = "xgboost") -> FittedModel:
    """Early-stop on the (later) tail, then refit on all training rows with that many rounds.

    ``fit`` and ``tail`` are the earlier and later parts of the training window
    (time-ordered, with a gap); the tail is never subsampled.
    """
    params = {**config.params, "seed": seed}
    if int(np.sum(y_tail)) >= config.min_tail_positives and int(np.sum(y_fit)) > 0:
        probe = xgb.train(params, _sampled(x_fit, y_fit, config.negative_rate, seed), config.max_rounds,
                          evals=[(xgb.DMatrix(x_tail, label=y_tail), "tail")],
                          early_stopping_rounds=config.early_stopping_rounds, verbose_eval=False,
                          callbacks=[_ProgressCallback(progress, f"{label} early stopping")])
        best, tail_score = probe.best_iteration + 1, float(probe.best_score)
        rounds = max(best, config.min_rounds)
        progress(f"{label}: tail AUCPR best {tail_score:.4f} at round {best}; refit {rounds} rounds on all "
                 f"{len(y_all):,} training rows")
    else:
        best, rounds, tail_score = None, config.fallback_rounds, float("nan")
        progress(f"{label}: tail has {int(np.sum(y_tail))} positives, too few to early-stop; "
                 f"{rounds} rounds on all {len(y_all):,} training rows")
    booster = xgb.train(params, _sampled(x_all, y_all, config.negative_rate, seed + 1), rounds, verbose_eval=False)
    return FittedModel(booster, rounds, best, tail_score)


def predict(booster: xgb.Booster, x: np.ndarray) -> np.ndarray:
    return np.asarray(booster.predict(xgb.DMatrix(x)), dtype=np.float64)
