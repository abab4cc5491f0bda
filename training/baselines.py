"""Baselines scored on the same split as the model.

* ``positive_rate``: every point gets the training positive rate (AUCPR of a
  constant score equals the test positive rate);
* ``priority_class_lr``: logistic regression on one-hot priority (0..11) and
  scheduling class (0..3), each with an "other/unknown" level;
* ``failed_before``: the task's prior failure events (of the selected types),
  ties broken by its job's failure events per task seen -- no fitting.

Fitted parameters are plain JSON (``baselines.json`` beside the model), so
``eval`` applies the very same baselines to any data.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from sklearn.linear_model import LogisticRegression

from featurelib.task_features import TASK_FEATURE_NAMES, EventType

BASELINES: Final = ("positive_rate", "priority_class_lr", "failed_before")
_PRIORITIES: Final = tuple(range(12))
_CLASSES: Final = tuple(range(4))
_TASK_COUNT: Final = {EventType.FAIL: "task_fails", EventType.EVICT: "task_evicts", EventType.KILL: "task_kills",
                      EventType.LOST: "task_losts"}
_JOB_COUNT: Final = {EventType.FAIL: "job_fails", EventType.EVICT: "job_evicts", EventType.KILL: "job_kills"}


def _col(x: np.ndarray, name: str) -> np.ndarray:
    return np.asarray(x[:, TASK_FEATURE_NAMES.index(name)], dtype=np.float64)


def _one_hot(values: np.ndarray, levels: tuple[int, ...]) -> np.ndarray:
    out = np.zeros((len(values), len(levels) + 1))
    for i, level in enumerate(levels):
        out[:, i] = values == level
    out[:, -1] = out[:, :-1].sum(axis=1) == 0
    return out


def _design(x: np.ndarray) -> np.ndarray:
    return np.hstack([_one_hot(_col(x, "priority"), _PRIORITIES), _one_hot(_col(x, "scheduling_class"), _CLASSES)])


def fit_baselines(x: np.ndarray, y: np.ndarray, seed: int) -> dict[str, Any]:
    """Fit the baselines that need fitting, for one horizon."""
    rate = float(np.mean(y)) if len(y) else 0.0
    lr: dict[str, Any] = {"intercept": float(np.log(max(rate, 1e-9) / max(1 - rate, 1e-9))),
                          "coef": [0.0] * (len(_PRIORITIES) + len(_CLASSES) + 2)}
    if 0 < y.sum() < len(y):
        model = LogisticRegression(C=1.0, max_iter=500, random_state=seed)
        model.fit(_design(x), y)
        lr = {"intercept": float(model.intercept_[0]), "coef": [float(c) for c in model.coef_[0]]}
    return {"positive_rate": rate, "priority_class_lr": lr}


def failed_before(x: np.ndarray, failure_types: tuple[int, ...]) -> np.ndarray:
    """True for rows whose task itself already has failure events (of the selected types) in its history."""
    task = sum((np.nan_to_num(_col(x, _TASK_COUNT[EventType(t)])) for t in failure_types), np.zeros(len(x)))
    return np.asarray(task > 0)


def score_baselines(params: dict[str, Any], x: np.ndarray, failure_types: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Scores of every baseline for rows ``x`` (features in ``TASK_FEATURE_NAMES`` order)."""
    lr = params["priority_class_lr"]
    logits = _design(x) @ np.asarray(lr["coef"]) + lr["intercept"]
    task = sum((np.nan_to_num(_col(x, _TASK_COUNT[EventType(t)])) for t in failure_types), np.zeros(len(x)))
    seen = np.maximum(np.nan_to_num(_col(x, "job_tasks_seen")), 1.0)
    job = sum((np.nan_to_num(_col(x, _JOB_COUNT[EventType(t)])) for t in failure_types if EventType(t) in _JOB_COUNT),
              np.zeros(len(x))) / seen
    return {
        "positive_rate": np.full(len(x), float(params["positive_rate"])),
        "priority_class_lr": 1.0 / (1.0 + np.exp(-logits)),
        "failed_before": task + job / (1.0 + job),
    }
