"""Abstention rules of a regime model, calibrated on the training workload kinds only.

* counters: the features the model cannot work without (``required_features``);
* out of distribution: robust z-scores of the contention signals (``CONTENTION_METRICS``) against the training windows
  (center = median, scale = 1.4826·MAD), score = mean capped |z| over the valid ones, threshold =
  the ``OOD_QUANTILE`` quantile of the training windows' scores (the card's score is divided by it);
* low confidence: the lowest floor on the top probability that gives ``SELECTIVE_TARGET`` selective
  accuracy on a validation cluster of the training kinds (fresh seed). What that floor gives on kinds
  the model never saw is estimated, without touching the held-out kinds, on kind-grouped folds *inside*
  the training kinds (one kind per class held out per fold, fresh seeds) and stored beside it. (Measured
  2026-11-26: on those folds no floor reaches 0.90 — calibrating there would make the model answer
  nothing — hence the in-distribution calibration plus the honest novel-kind estimate.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from featurelib.node.schema import FEATURE_INDEX
from services.regime import abstention
from simulator import holdout_split
from training.regime.model import LEARNING_RATE, RegimeModels, fit_regime_models, regime_feature_names
from training.regime.randomize import randomized_kinds
from training.regime.selective import confidence_floor
from training.regime.simwindows import Reporter, SimWindows, simulate_windows

OOD_QUANTILE: Final = 0.99
SELECTIVE_TARGET: Final = 0.90
MAD_TO_SIGMA: Final = 1.4826


def ood_section(x_full: np.ndarray, names: Sequence[str], quantile: float = OOD_QUANTILE) -> dict[str, Any]:
    """Robust centre/scale per feature and the score threshold at ``quantile`` of these windows."""
    cols = [FEATURE_INDEX[n] for n in names]
    x = x_full[:, cols].astype(np.float64)
    center = np.nanmedian(x, axis=0)
    mad = np.nanmedian(np.abs(x - center), axis=0) * MAD_TO_SIGMA
    spread = np.nanstd(x, axis=0)
    # a feature constant on most windows has MAD 0: fall back to its std, then to a tiny floor
    scale = np.where(mad > 1e-9, mad, np.where(spread > 1e-9, spread, 1e-6))
    center = np.nan_to_num(center, nan=0.0)
    raw = abstention.ood_score(x_full, _rules(cols, center, scale, 1.0))
    finite = raw[np.isfinite(raw)]
    threshold = float(np.quantile(finite, quantile)) if len(finite) else 1.0
    return {"features": list(names), "center": center.tolist(), "scale": scale.tolist(),
            "threshold": max(threshold, 1e-6), "score": "mean over valid features of min(|x - center| / scale, "
            f"{abstention.OOD_Z_CAP:g}), divided by threshold",
            "calibration": f"threshold = {quantile:g} quantile of the training windows' scores "
                           f"({len(finite):,} windows of the training kinds)"}


def _rules(cols: Sequence[int], center: np.ndarray, scale: np.ndarray, threshold: float) -> abstention.Rules:
    return abstention.Rules(required=(), ood_columns=tuple(cols), ood_center=tuple(center.tolist()),
                            ood_scale=tuple(scale.tolist()), ood_threshold=threshold)


def rules_of(section: dict[str, Any]) -> abstention.Rules:
    return abstention.rules_from_card(section, FEATURE_INDEX)


def kind_folds(train_kinds: Sequence[str], folds: int, seed: int) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """``folds`` (fit kinds, validation kinds) splits of the training kinds: one kind per class held out."""
    return [holdout_split(train_kinds, per_class=1, seed=seed * 100 + f) for f in range(folds)]


def _answerable(models: RegimeModels, data: SimWindows, required: Sequence[str],
                rules_x: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(top probability, correct) of the windows the counters and OOD rules let through; hard fraction."""
    section = {"required_features": list(required),
               "out_of_distribution": ood_section(rules_x, regime_feature_names("contention"))}
    mask, _ = abstention.judge(data.x, np.zeros((len(data), 0)), rules_of(section))
    probs = models.predict_proba(data.x)
    keep = mask == 0
    return probs.max(axis=1)[keep], (probs.argmax(axis=1) == data.regime)[keep], float(1 - keep.mean())


def _at_floor(conf: np.ndarray, hit: np.ndarray, floor: float) -> dict[str, Any]:
    answered = conf >= floor
    return {"windows": len(conf), "coverage_of_answerable": float(answered.mean()) if len(conf) else 0.0,
            "selective_accuracy": float(hit[answered].mean()) if answered.any() else None,
            "accuracy_answerable": float(hit.mean()) if len(hit) else None}


def calibrate_floor(models: RegimeModels, train: SimWindows, validation: SimWindows,
                    train_kinds: Sequence[str], *, folds: int, nodes: int, ticks: int, val_nodes: int,
                    val_ticks: int, seed: int, trees: int, depth: int, feature_names: list[str],
                    required: Sequence[str], progress: Reporter, kind_variants: int = 0,
                    kind_jitter: float = 0.0, target: float = SELECTIVE_TARGET,
                    learning_rate: float = LEARNING_RATE) -> dict[str, Any]:
    """The confidence floor for ``target`` selective accuracy on ``validation`` (training kinds, fresh seed), and
    what that floor gives on kind-grouped folds (kinds the fitted model did not see)."""
    conf, hit, hard = _answerable(models, validation, required, train.x)
    floor, met = confidence_floor(conf, hit, target=target)
    confs: list[np.ndarray] = []
    hits: list[np.ndarray] = []
    per_fold: list[dict[str, Any]] = []
    for f, (fit_kinds, val_kinds) in enumerate(kind_folds(train_kinds, folds, seed)):
        with randomized_kinds(fit_kinds, kind_variants, kind_jitter, seed + 3000 + f) as kinds:
            fit = simulate_windows(kinds=kinds, nodes=nodes, ticks=ticks, seed=seed + 3000 + f)
        val = simulate_windows(kinds=val_kinds, nodes=val_nodes, ticks=val_ticks, seed=seed + 4000 + f)
        fold_models = fit_regime_models(fit.x, fit.regime, fit.slowdown, trees=trees, depth=depth, seed=seed,
                                        feature_names=feature_names, classifier_only=True,
                                        learning_rate=learning_rate)
        c, h, fold_hard = _answerable(fold_models, val, required, fit.x)
        confs.append(c)
        hits.append(h)
        per_fold.append({"fit_kinds": list(fit_kinds), "validation_kinds": list(val_kinds), "windows": len(val),
                         "hard_abstained": fold_hard, **_at_floor(c, h, floor)})
        progress(f"kind fold {f + 1}/{folds}: validation kinds {', '.join(val_kinds)}, accuracy "
                 f"{per_fold[-1]['accuracy_answerable']}, at the floor: coverage "
                 f"{per_fold[-1]['coverage_of_answerable']:.3f}, selective {per_fold[-1]['selective_accuracy']}")
    pooled_c, pooled_h = np.concatenate(confs), np.concatenate(hits)
    novel_floor, novel_met = confidence_floor(pooled_c, pooled_h, target=target)
    return {"floor": floor, "target_selective_accuracy": target, "target_met_in_calibration": met,
            "calibration": f"lowest floor on the top probability giving selective accuracy >= {target} "
                           f"on a validation cluster of the training kinds (fresh seed, {len(validation):,} "
                           "windows; windows abstained on for counters or OOD excluded)",
            "calibration_hard_abstained": hard,
            "calibration_result": _at_floor(conf, hit, floor),
            "novel_kinds_estimate": {
                "what": f"{folds} kind-grouped folds inside the training kinds (one kind per class held out, "
                        "fresh seeds, the same recipe): the shipped floor on kinds the fitted model never saw",
                "pooled": _at_floor(pooled_c, pooled_h, floor), "folds": per_fold,
                "floor_for_target_on_novel_kinds": novel_floor, "target_reachable_on_novel_kinds": novel_met,
                "pooled_at_that_floor": _at_floor(pooled_c, pooled_h, novel_floor)}}
