"""Regime classifier and interference regressors (XGBoost), ONNX export with parity, evaluation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import onnx
import onnxmltools
import xgboost as xgb
from onnxmltools.convert.common.data_types import FloatTensorType

from contracts.models import REGIMES, WORKLOAD_CLASSES
from featurelib.node.schema import FEATURE_INDEX, NODE_FEATURE_NAMES
from training.regime.artifacts import INPUT_NAME, ParityError, max_abs_diff, save_onnx, session

TARGET_OPSET: Final = 15
PARITY_TOLERANCE: Final = 1e-4
REGIME_STATS: Final = ("mean_10s", "mean_60s", "std_60s")
LEARNING_RATE: Final = 0.15
EXCLUDED_METRICS: Final = ("sanity_violation", "rec_mkpi", "rec_mem_gps", "membw_util")


CONTENTION_METRICS: Final = ("membw_gbs", "llc_miss_ratio", "llc_mpki", "cache_miss_ratio", "cache_mpki",
                              "stall_frontend", "stall_backend", "branch_miss_ratio", "ipc", "busy_cpus")
"""One signal per contention mechanism of the simulator (bandwidth, LLC misses, stalls, branch misses,
IPC) plus busy CPUs (how much of the node the co-runners occupy): the OOD score's features."""


def regime_feature_names(feature_set: str = "pmu_levels") -> list[str]:
    """Columns the regime models read.

    ``pmu_levels`` (default): current level (10 s, 60 s means) and recent spread (60 s std) of every
    PMU metric. ``contention``: the 10 s mean of ``CONTENTION_METRICS`` only. Measured with and without
    domain randomisation (training/README.md, regime section): without it both transfer equally badly to
    unseen kinds; with it ``pmu_levels`` transfers better. z-scores and deltas against the 300 s
    baseline are left out: co-runner epochs are shorter than the baseline, so they mostly encode when
    the last change happened (adding them did not help on held-out kinds).
    """
    if feature_set == "contention":
        return [f"{m}_mean_10s" for m in CONTENTION_METRICS]
    if feature_set == "pmu_levels":
        return [n for n in NODE_FEATURE_NAMES
                if n.endswith(REGIME_STATS) and not n.startswith(EXCLUDED_METRICS)]
    raise ValueError(f"unknown feature set {feature_set!r} (contention, pmu_levels)")


FEATURE_SETS: Final = ("contention", "pmu_levels")


def columns(names: Sequence[str]) -> np.ndarray:
    return np.array([FEATURE_INDEX[n] for n in names], dtype=np.int64)


@dataclass
class RegimeModels:
    feature_names: list[str]
    classifier: xgb.XGBClassifier
    interference: list[xgb.XGBRegressor]
    """One per WORKLOAD_CLASSES entry, predicting log(slowdown)."""

    def predict_proba(self, x_full: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.asarray(self.classifier.predict_proba(x_full[:, columns(self.feature_names)]))
        return out

    def predict_slowdown(self, x_full: np.ndarray) -> np.ndarray:
        x = x_full[:, columns(self.feature_names)]
        logs = np.stack([r.predict(x) for r in self.interference], axis=1)
        out: np.ndarray = np.clip(np.exp(logs), 1.0, 100.0)
        return out


def fit_regime_models(
    x_full: np.ndarray, regime: np.ndarray, slowdown: np.ndarray, *, trees: int, depth: int, seed: int,
    feature_names: list[str] | None = None, classifier_only: bool = False, learning_rate: float = LEARNING_RATE,
) -> RegimeModels:
    names = feature_names or regime_feature_names()
    x = x_full[:, columns(names)]
    common = {"max_depth": depth, "learning_rate": learning_rate, "subsample": 0.8, "colsample_bytree": 0.8,
              "tree_method": "hist", "max_bin": 64, "n_jobs": 2, "random_state": seed}
    clf = xgb.XGBClassifier(n_estimators=trees, objective="multi:softprob", **common)
    clf.fit(x, regime)
    regs: list[xgb.XGBRegressor] = []
    for j in range(0 if classifier_only else len(WORKLOAD_CLASSES)):
        reg = xgb.XGBRegressor(n_estimators=max(20, trees // 2), objective="reg:squarederror", **common)
        reg.fit(x, np.log(np.maximum(slowdown[:, j], 1.0)))
        regs.append(reg)
    return RegimeModels(names, clf, regs)


def classification_metrics(truth: np.ndarray, pred: np.ndarray) -> dict[str, Any]:
    k = len(REGIMES)
    cm = np.zeros((k, k), dtype=np.int64)
    for a, b in zip(truth.tolist(), pred.tolist(), strict=True):
        cm[a, b] += 1
    recall = {REGIMES[i]: float(cm[i, i] / cm[i].sum()) if cm[i].sum() else None for i in range(k)}
    precision = {REGIMES[i]: float(cm[i, i] / cm[:, i].sum()) if cm[:, i].sum() else None for i in range(k)}
    f1 = []
    for r in REGIMES:
        p, q = precision[r], recall[r]
        f1.append(0.0 if not p or not q else 2 * p * q / (p + q))
    return {
        "windows": len(truth),
        "accuracy": float((truth == pred).mean()) if len(truth) else None,
        "macro_f1": float(np.mean(f1)),
        "chance_accuracy": float(np.max(np.bincount(truth, minlength=k)) / max(len(truth), 1)),
        "recall": recall,
        "precision": precision,
        "confusion": {"rows_truth_cols_predicted": list(REGIMES), "matrix": cm.tolist()},
    }


def interference_metrics(truth: np.ndarray, pred: np.ndarray) -> dict[str, Any]:
    err = pred - truth
    return {
        "mae": {c: float(np.mean(np.abs(err[:, j]))) for j, c in enumerate(WORKLOAD_CLASSES)},
        "under_prediction_rate_0.1": {c: float(np.mean(err[:, j] < -0.1)) for j, c in enumerate(WORKLOAD_CLASSES)},
        "mean_truth": {c: float(np.mean(truth[:, j])) for j, c in enumerate(WORKLOAD_CLASSES)},
    }


def export_regime_models(models: RegimeModels, x_check_full: np.ndarray, out_dir: Path,
                         metadata: dict[str, str]) -> dict[str, Any]:
    """Write regime_classifier.onnx and interference_<class>.onnx; raise ParityError on mismatch."""
    n = len(models.feature_names)
    x = np.ascontiguousarray(x_check_full[:, columns(models.feature_names)], dtype=np.float32)
    types = [(INPUT_NAME, FloatTensorType([None, n]))]
    files: dict[str, Any] = {}
    sha: dict[str, str] = {}
    parity: dict[str, float] = {}
    clf_onnx = onnxmltools.convert_xgboost(models.classifier, initial_types=types, target_opset=TARGET_OPSET)
    got = session(clf_onnx).run(None, {INPUT_NAME: x})[1]
    parity["classifier"] = max_abs_diff(np.asarray(got), models.classifier.predict_proba(x))
    files["classifier"] = "regime_classifier.onnx"
    sha[files["classifier"]] = save_onnx(clf_onnx, out_dir / files["classifier"], metadata)
    files["interference"] = {}
    for cls, reg in zip(WORKLOAD_CLASSES, models.interference, strict=True):
        model: onnx.ModelProto = onnxmltools.convert_xgboost(reg, initial_types=types, target_opset=TARGET_OPSET)
        out = np.asarray(session(model).run(None, {INPUT_NAME: x})[0]).reshape(-1)
        parity[f"interference_{cls}"] = max_abs_diff(out, reg.predict(x))
        name = f"interference_{cls}.onnx"
        files["interference"][cls] = name
        sha[name] = save_onnx(model, out_dir / name, metadata)
    worst = max(parity.values())
    if not worst <= PARITY_TOLERANCE:
        raise ParityError(f"ONNX differs from XGBoost by {worst:.3g} (> {PARITY_TOLERANCE}): {parity}")
    return {"files": files, "sha256": sha, "parity_max_abs_diff": parity, "parity_tolerance": PARITY_TOLERANCE}
