"""Per-horizon evaluation of the model and the baselines, and the PR-curve plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from training.baselines import BASELINES, score_baselines
from training.metrics import calibration_summary, pr_curve, ranking_metrics

Curves = dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]


def evaluate_horizon(y: np.ndarray, model_prob: np.ndarray, x: np.ndarray, baseline_params: dict[str, Any],
                     failure_types: tuple[int, ...]) -> tuple[dict[str, Any], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Metrics for one horizon on labelled rows, plus PR curves for plotting."""
    scores = {"model": model_prob, **score_baselines(baseline_params, x, failure_types)}
    result: dict[str, Any] = {
        "n": len(y),
        "positives": int(y.sum()),
        "positive_rate": float(y.mean()) if len(y) else None,
        "model": ranking_metrics(y, model_prob),
        "baselines": {name: ranking_metrics(y, scores[name]) for name in BASELINES},
        "calibration": calibration_summary(y, model_prob),
    }
    model_aucpr = result["model"]["aucpr"]
    result["model_beats_every_baseline_aucpr"] = model_aucpr is not None and all(
        b["aucpr"] is not None and model_aucpr > b["aucpr"] for b in result["baselines"].values())
    curves = {name: pr_curve(y, s) for name, s in scores.items()} if 0 < y.sum() < len(y) else {}
    return result, curves


def plot_pr_curves(curves: Curves, metrics: dict[str, dict[str, Any]], path: Path, title: str) -> None:
    """One panel per horizon: the model's and each baseline's precision-recall curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    horizons = list(curves)
    fig, axes = plt.subplots(1, max(len(horizons), 1), figsize=(5 * max(len(horizons), 1), 4.2), squeeze=False)
    for ax, horizon in zip(axes[0], horizons, strict=False):
        m = metrics[horizon]
        for name, (recall, precision) in curves[horizon].items():
            aucpr = m["model"]["aucpr"] if name == "model" else m["baselines"][name]["aucpr"]
            label = f"{name} (AUCPR {aucpr:.3f})" if aucpr is not None else name
            ax.plot(recall, precision, label=label, linewidth=2.0 if name == "model" else 1.2,
                    drawstyle="steps-post")
        ax.set_title(f"horizon {horizon} (positive rate {m['positive_rate']:.4f}, n={m['n']:,})", fontsize=9)
        ax.set_xlabel("recall")
        ax.set_ylabel("precision")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
