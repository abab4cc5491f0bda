"""Selective-classification metrics: accuracy, coverage, selective accuracy, risk–coverage (pure numpy).

Definitions (shared by ``borgctl eval regime``, training's calibration and the model card):

* ``accuracy``: the top class against the truth on every window, as if the model never abstained;
* ``coverage``: fraction of windows the model answered (abstention mask 0);
* ``selective_accuracy``: accuracy on the answered windows (None when it answered none);
* risk–coverage curve: windows ranked by how willing the model is to answer (hard abstentions —
  counters missing, out of distribution — last, then by top probability); at coverage ``c`` the
  risk is the error rate of the first ``c`` of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from services.regime.abstention import below_top_class_floor


def selective_metrics(truth: np.ndarray, pred: np.ndarray, answered: np.ndarray,
                      labels: Sequence[str]) -> dict[str, Any]:
    """Accuracy, coverage, selective accuracy and per-class recall (all windows / answered windows)."""
    n = len(truth)
    correct = truth == pred
    k = int(answered.sum())
    recall: dict[str, float | None] = {}
    selective_recall: dict[str, float | None] = {}
    class_coverage: dict[str, float | None] = {}
    for i, name in enumerate(labels):
        of = truth == i
        m = int(of.sum())
        recall[name] = float(correct[of].mean()) if m else None
        a = of & answered
        class_coverage[name] = float(a.sum() / m) if m else None
        selective_recall[name] = float(correct[a].mean()) if a.any() else None
    return {
        "windows": n,
        "answered": k,
        "accuracy": float(correct.mean()) if n else None,
        "coverage": float(k / n) if n else None,
        "selective_accuracy": float(correct[answered].mean()) if k else None,
        "recall": recall,
        "selective_recall": selective_recall,
        "coverage_by_class": class_coverage,
    }


def ranking_key(confidence: np.ndarray, hard_abstain: np.ndarray) -> np.ndarray:
    """Order windows most-willing first: ``np.argsort`` of the result (hard abstentions go last)."""
    key: np.ndarray = np.where(hard_abstain, 2.0, 0.0) - np.nan_to_num(confidence, nan=0.0)
    return key


def risk_coverage(correct: np.ndarray, confidence: np.ndarray, hard_abstain: np.ndarray,
                  points: int = 50) -> dict[str, list[float]]:
    """(coverage, selective accuracy, risk) at ``points`` evenly spaced coverages in (0, 1]."""
    n = len(correct)
    if not n:
        return {"coverage": [], "selective_accuracy": [], "risk": []}
    order = np.argsort(ranking_key(confidence, hard_abstain), kind="stable")
    hits = np.cumsum(correct[order].astype(np.float64))
    counts = np.unique(np.clip(np.round(np.linspace(1 / points, 1.0, points) * n).astype(np.int64), 1, n))
    acc = hits[counts - 1] / counts
    return {"coverage": (counts / n).tolist(), "selective_accuracy": acc.tolist(), "risk": (1 - acc).tolist()}


def confidence_floor(confidence: np.ndarray, correct: np.ndarray, *, target: float,
                     min_answered: int = 50) -> tuple[float, bool]:
    """The lowest floor on the top probability whose answered windows reach ``target`` accuracy.

    ``confidence``/``correct``: windows not already abstained on for other reasons. Returns (floor,
    target met). When no floor with at least ``min_answered`` windows reaches the target, the floor
    with the best selective accuracy among those is returned, with ``False``.
    """
    n = len(confidence)
    if n == 0:
        return 1.0, False
    order = np.argsort(-confidence, kind="stable")
    conf = confidence[order]
    acc = np.cumsum(correct[order].astype(np.float64)) / np.arange(1, n + 1)
    # a floor must keep every window of equal confidence together: only cut where confidence changes
    last_of_tie = np.r_[conf[1:] != conf[:-1], True]
    ok = last_of_tie & (np.arange(1, n + 1) >= min(min_answered, n))
    meets = ok & (acc >= target)
    if meets.any():
        i = int(np.nonzero(meets)[0].max())
        return float(conf[i]), True
    candidates = np.nonzero(ok)[0]
    i = int(candidates[np.argmax(acc[candidates])])
    return float(conf[i]), False


def class_confidence_floors(probs: np.ndarray, truth: np.ndarray, *, target: float,
                            min_answered: int = 50) -> tuple[list[float], list[bool]]:
    """One floor per predicted class (Mondrian-style): for the windows whose top class is ``k``, the lowest floor
    on the top probability whose answers reach ``target`` accuracy (``confidence_floor`` on that class alone).
    Returns (floors, target met) indexed by class; a class never predicted gets floor 1.0, not met."""
    pred = probs.argmax(axis=1)
    confidence = probs.max(axis=1)
    correct = pred == truth
    floors: list[float] = []
    met: list[bool] = []
    for k in range(probs.shape[1]):
        of = pred == k
        floor, ok = confidence_floor(confidence[of], correct[of], target=target, min_answered=min_answered)
        floors.append(floor)
        met.append(ok and bool(of.any()))
    return floors, met


def answered_by_class_floors(probs: np.ndarray, floors: Sequence[float]) -> np.ndarray:
    """Which rows clear the floor of their own top class (the served rule: ``services.regime.abstention``)."""
    answered: np.ndarray = ~below_top_class_floor(probs, floors)
    return answered
