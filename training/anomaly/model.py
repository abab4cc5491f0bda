"""Isolation forest over node feature windows → ONNX (skl2onnx), evaluated on injected anomalies.

Score: the isolation-forest anomaly score of the original paper, ``s = -score_samples(x)``
in (0, 1] (0.5 ≈ nothing special, → 1 easy to isolate). In ONNX the forest returns
``scores = decision_function = score_samples - offset_``, so the service computes
``s = -(scores + offset)`` with ``offset`` from the model card. The alert threshold is the
``1 - target_fpr`` quantile of ``s`` on the training cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
from skl2onnx import to_onnx
from skl2onnx.common.data_types import FloatTensorType
from sklearn.ensemble import IsolationForest
from sklearn.impute import SimpleImputer
from sklearn.pipeline import Pipeline

from featurelib.node.schema import FEATURE_INDEX, NODE_FEATURE_NAMES
from simulator import ANOMALY_KINDS
from training.regime.artifacts import INPUT_NAME, ParityError, max_abs_diff, save_onnx, session

PARITY_TOLERANCE: Final = 1e-4
ANOMALY_STATS: Final = ("mean_10s",)
MAX_SAMPLES: Final = 2048
EXCLUDED: Final = ("rec_mkpi", "rec_mem_gps", "membw_util")
MODEL_FILE: Final = "isolation_forest.onnx"


def anomaly_feature_names() -> list[str]:
    """The current level of every metric.

    Measured on the simulator (ROC AUC on injected anomalies): levels alone 0.92; adding the
    z-scores against the node's 300 s baseline 0.90, z-scores alone 0.79 — co-runner epochs
    change every 30–120 s, so "unlike this node's recent past" is mostly normal churn.
    """
    return [n for n in NODE_FEATURE_NAMES if n.endswith(ANOMALY_STATS) and not n.startswith(EXCLUDED)]


def _cols(names: list[str]) -> np.ndarray:
    return np.array([FEATURE_INDEX[n] for n in names], dtype=np.int64)


@dataclass
class AnomalyModel:
    feature_names: list[str]
    pipeline: Pipeline
    offset: float
    threshold: float

    def score(self, x_full: np.ndarray) -> np.ndarray:
        return np.asarray(-self.pipeline.score_samples(x_full[:, _cols(self.feature_names)]), dtype=np.float64)


def fit_anomaly_model(x_full: np.ndarray, *, trees: int, seed: int, target_fpr: float) -> AnomalyModel:
    names = anomaly_feature_names()
    x = x_full[:, _cols(names)]
    pipe = Pipeline([
        ("impute", SimpleImputer(strategy="median", keep_empty_features=True)),
        ("forest", IsolationForest(n_estimators=trees, max_samples=min(MAX_SAMPLES, len(x)), random_state=seed,
                                   n_jobs=1)),
    ])
    pipe.fit(x)
    scores = -pipe.score_samples(x)
    threshold = float(np.quantile(scores, 1.0 - target_fpr))
    return AnomalyModel(names, pipe, float(pipe[-1].offset_), threshold)


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float | None:
    pos, neg = scores[labels], scores[~labels]
    if not len(pos) or not len(neg):
        return None
    order = np.argsort(np.concatenate([neg, pos]), kind="mergesort")
    ranks = np.empty(len(order))
    ranks[order] = np.arange(1, len(order) + 1)
    return float((ranks[len(neg):].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def evaluate(model: AnomalyModel, x_full: np.ndarray, anomaly: np.ndarray) -> dict[str, Any]:
    scores = model.score(x_full)
    truth = anomaly >= 0
    flagged = scores >= model.threshold
    tp = int(np.sum(flagged & truth))
    fp = int(np.sum(flagged & ~truth))
    fn = int(np.sum(~flagged & truth))
    per_kind = {}
    for i, kind in enumerate(ANOMALY_KINDS):
        sel = anomaly == i
        per_kind[kind] = {"windows": int(sel.sum()), "recall": float(flagged[sel].mean()) if sel.any() else None}
    return {
        "windows": len(truth),
        "anomalous_windows": int(truth.sum()),
        "roc_auc": roc_auc(truth, scores),
        "precision": tp / (tp + fp) if tp + fp else None,
        "recall": tp / (tp + fn) if tp + fn else None,
        "false_positive_rate": fp / max(int((~truth).sum()), 1),
        "threshold": model.threshold,
        "recall_by_kind": per_kind,
    }


def export_anomaly_model(model: AnomalyModel, x_check_full: np.ndarray, out_dir: Path,
                         metadata: dict[str, str]) -> dict[str, Any]:
    n = len(model.feature_names)
    x = np.ascontiguousarray(x_check_full[:, _cols(model.feature_names)], dtype=np.float32)
    onx = to_onnx(model.pipeline, initial_types=[(INPUT_NAME, FloatTensorType([None, n]))],
                  target_opset={"": 15, "ai.onnx.ml": 3})
    _, scores = session(onx).run(None, {INPUT_NAME: x})
    got = -(np.asarray(scores, dtype=np.float64).reshape(-1) + model.offset)
    diff = max_abs_diff(got, -model.pipeline.score_samples(x))
    if not diff <= PARITY_TOLERANCE:
        raise ParityError(f"ONNX isolation forest differs by {diff:.3g} (> {PARITY_TOLERANCE})")
    sha = save_onnx(onx, out_dir / MODEL_FILE, metadata)
    return {"files": {"forest": MODEL_FILE}, "sha256": {MODEL_FILE: sha}, "parity_max_abs_diff": diff,
            "parity_tolerance": PARITY_TOLERANCE}
