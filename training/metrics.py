"""Ranking and calibration metrics for binary risk scores (ties handled fairly)."""

from __future__ import annotations

import itertools
from typing import Any, Final

import numpy as np
from sklearn.metrics import average_precision_score, precision_recall_curve, roc_auc_score, roc_curve

PRECISION_AT_K: Final = (100, 1000)
FIXED_FPR: Final = 0.05
CALIBRATION_EDGES: Final = (0.0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def precision_at_k(y: np.ndarray, score: np.ndarray, k: int) -> float | None:
    """Expected precision of the top ``k`` when ties at the cut are broken at random."""
    if len(y) == 0:
        return None
    k = min(k, len(y))
    order = np.sort(score)[::-1]
    cut = order[k - 1]
    above = score > cut
    tied = score == cut
    n_above = int(above.sum())
    hits = float(y[above].sum()) + float(y[tied].sum()) * (k - n_above) / max(int(tied.sum()), 1)
    return hits / k


def recall_at_fpr(y: np.ndarray, score: np.ndarray, fpr: float = FIXED_FPR) -> float | None:
    """True-positive rate at false-positive rate ``fpr`` on the (interpolated) ROC curve."""
    if y.sum() == 0 or y.sum() == len(y):
        return None
    fprs, tprs, _ = roc_curve(y, score)
    return float(np.interp(fpr, fprs, tprs))


def ranking_metrics(y: np.ndarray, score: np.ndarray) -> dict[str, Any]:
    """AUCPR, ROC-AUC, precision@k and recall at 5 % FPR (None when undefined)."""
    both = 0 < y.sum() < len(y)
    return {
        "aucpr": float(average_precision_score(y, score)) if both else None,
        "roc_auc": float(roc_auc_score(y, score)) if both else None,
        "precision_at_k": {str(k): precision_at_k(y, score, k) for k in PRECISION_AT_K},
        f"recall_at_fpr_{FIXED_FPR:g}": recall_at_fpr(y, score),
    }


def calibration_table(y: np.ndarray, prob: np.ndarray,
                      edges: tuple[float, ...] = CALIBRATION_EDGES) -> list[dict[str, Any]]:
    """Predicted vs observed positive rate per probability bin (empty bins omitted)."""
    rows = []
    for lo, hi in itertools.pairwise(edges):
        mask = (prob >= lo) & ((prob < hi) if hi < edges[-1] else (prob <= hi))
        n = int(mask.sum())
        if n:
            rows.append({"bin": [lo, hi], "n": n, "mean_predicted": float(prob[mask].mean()),
                         "observed_rate": float(y[mask].mean()), "positives": int(y[mask].sum())})
    return rows


def calibration_summary(y: np.ndarray, prob: np.ndarray) -> dict[str, Any]:
    return {
        "brier": float(np.mean((prob - y) ** 2)) if len(y) else None,
        "mean_predicted": float(prob.mean()) if len(y) else None,
        "observed_rate": float(y.mean()) if len(y) else None,
        "table": calibration_table(y, prob),
    }


def pr_curve(y: np.ndarray, score: np.ndarray, max_points: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """(recall, precision) arrays, thinned for plotting."""
    precision, recall, _ = precision_recall_curve(y, score)
    if len(recall) > max_points:
        idx = np.unique(np.linspace(0, len(recall) - 1, max_points).astype(int))
        precision, recall = precision[idx], recall[idx]
    return recall, precision
