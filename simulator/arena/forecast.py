"""The arena's forecast section: the shipped load forecaster and two baselines against each node's actual load.

The arena has no forecast stage, but it knows every node's load at every tick: the requested CPU and
memory of the tasks placed there (fractions of the node; ``ArenaOutcome.node_load``). That series is fed,
one sample per tick, through exactly what the forecast stage does with a node's 10 s windows
(``featurelib.load_features.LoadHistory``: epoch-aligned 5-minute bucket means, the 36 inputs at each
closed bucket), and the shipped ONNX boosters (``services.forecast.model``) forecast the bucket 5 / 15 / 30
minutes of **arena time** ahead. Baselines as in ``borgctl eval forecast``: persistence (the last bucket)
and the mean of the last hour. Scored, like the stage, only where the node has at least ``min_history``
closed buckets (the stage's ``FORECAST_MIN_HISTORY_BUCKETS``), every method on the same points:
WAPE = Σ|actual − p50| / Σ|actual| and p90 coverage of the model.

Caveat, stated with the figures: arena time compresses the trace (arrivals of hours into the horizon,
task durations capped at horizon / 12), so 5 minutes here are not 5 minutes of a real VM's load, which
is what the model was trained on; a quick run (1 h = 12 buckets) leaves almost nothing to score.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Final

import numpy as np

from featurelib.load_features import HORIZON_STEPS, STEP_S, LoadHistory, bucket_of

MIN_HISTORY: Final = 12
"""Closed buckets a node needs before it is scored (the forecast stage's default: 1 h)."""
RESOURCES: Final = ("cpu", "memory")
BASELINES: Final = ("persistence", "moving_avg_1h")


def _buckets(node_load: np.ndarray, tick_s: float) -> tuple[list[LoadHistory], list[list[list[float]]],
                                                            list[dict[int, tuple[float, float]]]]:
    """Per node: the history after the run, the 36 inputs at each closed bucket, and the bucket means (%)."""
    ticks, nodes, _ = node_load.shape
    histories = [LoadHistory() for _ in range(nodes)]
    inputs: list[list[list[float]]] = [[] for _ in range(nodes)]
    means: list[dict[int, tuple[float, float]]] = [{} for _ in range(nodes)]
    sums: list[dict[int, list[float]]] = [{} for _ in range(nodes)]
    pct = node_load * 100.0
    for t in range(ticks):
        t_s = (t + 0.5) * tick_s  # the tick's midpoint picks its bucket, as a window's midpoint does live
        b = bucket_of(t_s)
        for i in range(nodes):
            cpu, mem = float(pct[t, i, 0]), float(pct[t, i, 1])
            acc = sums[i].setdefault(b, [0.0, 0.0, 0.0])
            acc[0] += cpu
            acc[1] += mem
            acc[2] += 1
            if histories[i].observe(t_s, cpu, mem) is not None:
                feats = histories[i].features()
                assert feats is not None
                inputs[i].append(feats)
    for i in range(nodes):
        last = histories[i].last_closed
        means[i] = {b: (a[0] / a[2], a[1] / a[2]) for b, a in sums[i].items() if last is not None and b <= last}
    return histories, inputs, means


def evaluate(node_load: np.ndarray | None, tick_s: float, model: Any | None = None,
             min_history: int = MIN_HISTORY) -> dict[str, Any]:
    """WAPE per resource and horizon of the model (if given) and the baselines, on the same points."""
    out: dict[str, Any] = {"bucket_s": STEP_S, "min_history_buckets": min_history,
                           "model_version": getattr(model, "version", None), "scores": {}}
    if node_load is None or node_load.size == 0:
        out["skipped"] = "no per-node load recorded"
        return out
    _, inputs, means = _buckets(node_load, tick_s)
    nodes = node_load.shape[1]
    # the forecast point k is the k-th closed bucket of the node, in order; its inputs are inputs[i][j]
    points: list[tuple[int, int, int]] = []  # (node, bucket k, row in the node's inputs)
    for i in range(nodes):
        keys = sorted(means[i])
        for j, k in enumerate(keys):
            if j + 1 >= min_history:
                points.append((i, k, j))
    preds: dict[tuple[str, int, float], np.ndarray] = {}
    if model is not None and points:
        x = np.asarray([inputs[i][j] for i, _, j in points], dtype=np.float32)
        for head, values in zip(model.heads, model(x), strict=True):
            preds[(head.resource, head.horizon_s, head.quantile)] = values
    for r, resource in enumerate(RESOURCES):
        for steps in HORIZON_STEPS:
            h = steps * STEP_S
            sums = {m: [0.0, 0.0] for m in (*BASELINES, "model")}
            covered = n = 0
            for p, (i, k, _) in enumerate(points):
                target = means[i].get(k + steps)
                if target is None:
                    continue
                y = target[r]
                hist = [means[i][b][r] for b in range(k - 11, k + 1) if b in means[i]]
                guesses = {"persistence": means[i][k][r], "moving_avg_1h": sum(hist) / len(hist)}
                if preds:
                    p50 = min(max(float(preds[(resource, h, 0.5)][p]), 0.0), 100.0)
                    p90 = max(p50, min(max(float(preds[(resource, h, 0.9)][p]), 0.0), 100.0))
                    guesses["model"] = p50
                    covered += y <= p90
                for m, g in guesses.items():
                    sums[m][0] += abs(y - g)
                    sums[m][1] += abs(y)
                n += 1
            case: dict[str, Any] = {"points": n}
            for m, (err, tot) in sums.items():
                if m == "model" and not preds:
                    continue
                case[f"wape_{m}"] = err / tot if tot > 0 else None
            if preds:
                case["p90_coverage"] = covered / n if n else None
                best = min((case[f"wape_{b}"] for b in BASELINES if case[f"wape_{b}"] is not None), default=None)
                wape = case.get("wape_model")
                case["ratio_to_best_baseline"] = wape / best if wape is not None and best else None
            out["scores"][f"{resource} {h // 60}min"] = case
    return out


def load_model(root: Path) -> tuple[Any | None, str | None]:
    """The shipped forecaster (root's CURRENT, or a version directory), or None and why not."""
    from services.forecast.model import load_forecast_model
    from services.runtime.model_watch import ModelRefusedError

    version = root
    current = root / "CURRENT"
    if current.is_file():
        version = root / current.read_text().strip()
    try:
        return load_forecast_model(version), None
    except (ModelRefusedError, OSError, ValueError) as exc:
        return None, f"forecast model not applied: {exc}"


def plot(node_load: np.ndarray, tick_s: float, model: Any | None, out_path: Path, title: str,
         min_history: int = MIN_HISTORY) -> Path | None:
    """The busiest node's CPU: actual 5-minute means beside the p50 made 15 minutes earlier (model, persistence)."""
    _, inputs, means = _buckets(node_load, tick_s)
    if not any(means):
        return None
    spread = [float(np.var([v[0] for v in m.values()])) if m else -1.0 for m in means]
    i = spread.index(max(spread))
    keys = sorted(means[i])
    steps = 3
    actual_x = [(k + 1) * STEP_S / 60 for k in keys]
    actual_y = [means[i][k][0] for k in keys]
    persist = [((k + steps + 1) * STEP_S / 60, means[i][k][0]) for k in keys]
    model_pts: list[tuple[float, float, float]] = []
    if model is not None:
        rows = [(k, inputs[i][j]) for j, k in enumerate(keys) if j + 1 >= min_history]
        if rows:
            preds = dict(zip(((h.resource, h.horizon_s, h.quantile) for h in model.heads),
                             model(np.asarray([r for _, r in rows], dtype=np.float32)), strict=True))
            h = steps * STEP_S
            model_pts = [((k + steps + 1) * STEP_S / 60, float(preds[("cpu", h, 0.5)][n]),
                          float(preds[("cpu", h, 0.9)][n])) for n, (k, _) in enumerate(rows)]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.plot(actual_x, actual_y, label="actual (5-min mean of requested CPU)", color="black", linewidth=1.6)
    ax.plot(*zip(*persist, strict=True), label="persistence, made 15 min earlier", linestyle=":", color="grey")
    if model_pts:
        xs, p50, p90 = zip(*model_pts, strict=True)
        ax.plot(xs, p50, label="model p50, made 15 min earlier", color="tab:blue", linestyle="--")
        ax.fill_between(xs, p50, p90, color="tab:blue", alpha=0.15, label="model p50–p90")
    ax.set_xlabel("arena time (min, bucket end)")
    ax.set_ylabel("node CPU requested (%)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return out_path


def summary_line(name: str, result: dict[str, Any]) -> str:
    """One progress line: CPU at 15 min, model against persistence."""
    case = result["scores"].get("cpu 15min") or {}

    def f(v: float | None) -> str:
        return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"

    return (f"{name}: forecast cpu 15min WAPE model {f(case.get('wape_model'))}, persistence "
            f"{f(case.get('wape_persistence'))} on {case.get('points', 0)} points")

