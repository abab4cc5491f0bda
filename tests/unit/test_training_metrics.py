"""Metrics (tie-aware) and baselines."""

from __future__ import annotations

import numpy as np
import pytest

from featurelib.task_features import TASK_FEATURE_NAMES
from training.baselines import fit_baselines, score_baselines
from training.dataset import time_split
from training.metrics import calibration_table, precision_at_k, ranking_metrics, recall_at_fpr


def test_precision_at_k_breaks_ties_fairly() -> None:
    y = np.array([1, 0, 0, 0, 1, 0, 0, 0, 0, 0], dtype=float)
    assert precision_at_k(y, np.full(10, 0.3), 5) == pytest.approx(0.2)  # constant score = base rate
    assert precision_at_k(y, y, 2) == 1.0
    assert precision_at_k(y, y, 4) == 0.5


def test_recall_at_fixed_false_positive_rate() -> None:
    y = np.array([0] * 100 + [1] * 10, dtype=float)
    assert recall_at_fpr(y, y) == 1.0
    assert recall_at_fpr(y, np.zeros(110)) == pytest.approx(0.05)
    assert recall_at_fpr(np.zeros(5), np.zeros(5)) is None


def test_ranking_metrics_are_none_without_both_classes() -> None:
    m = ranking_metrics(np.zeros(10), np.linspace(0, 1, 10))
    assert m["aucpr"] is None and m["roc_auc"] is None


def test_calibration_table_covers_every_row() -> None:
    rng = np.random.default_rng(1)
    p = rng.random(1000) ** 3
    y = (rng.random(1000) < p).astype(float)
    table = calibration_table(y, p)
    assert sum(row["n"] for row in table) == 1000
    assert all(row["bin"][0] <= row["mean_predicted"] <= row["bin"][1] for row in table)


def _rows(**columns: list[float]) -> np.ndarray:
    x = np.full((len(next(iter(columns.values()))), len(TASK_FEATURE_NAMES)), np.nan, dtype=np.float32)
    for name, values in columns.items():
        x[:, TASK_FEATURE_NAMES.index(name)] = values
    return x


def test_failed_before_ranks_task_failures_then_job_failures() -> None:
    x = _rows(task_fails=[0, 0, 2, 1], job_fails=[0, 5, 0, 0], job_tasks_seen=[1, 10, 1, 1],
              priority=[0, 0, 0, 0], scheduling_class=[1, 1, 1, 1])
    params = fit_baselines(x, np.array([0, 1, 1, 0], dtype=float), seed=0)
    scores = score_baselines(params, x, failure_types=(3,))
    assert list(np.argsort(-scores["failed_before"])) == [2, 3, 1, 0]
    assert np.all(scores["positive_rate"] == 0.5)
    assert scores["priority_class_lr"].shape == (4,)


def test_time_split_leaves_a_gap() -> None:
    split = time_split(0, 1000, 0.7, 100)
    t = np.arange(0, 1001)
    assert split.train_mask(t).sum() == 700 and split.test_mask(t).min() is not None
    assert not np.any(split.train_mask(t) & split.test_mask(t))
    assert t[split.test_mask(t)].min() - t[split.train_mask(t)].max() == 101
