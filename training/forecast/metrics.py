"""Forecast metrics per resource and horizon: MAE, WAPE, 1 - WAPE, p90 coverage, and the baselines' WAPE."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np

from featurelib.load_features import HORIZON_STEPS, RESOURCES, STEP_S
from training.forecast.dataset import BASELINES, Points, baseline

RATIO_TARGET: Final = 0.8
"""Model WAPE must be at most this times the best baseline's (issue 24)."""
RESOURCE_LABEL: Final = {"cpu": "cpu", "mem": "memory"}


def case_name(resource: int, h: int) -> str:
    return f"{RESOURCE_LABEL[RESOURCES[resource]]} {HORIZON_STEPS[h] * STEP_S // 60}min"


def wape(y: np.ndarray, p: np.ndarray) -> float | None:
    denom = float(np.sum(np.abs(y)))
    return float(np.sum(np.abs(y - p)) / denom) if denom > 0 else None


def score(points: Points, after_s: int, forecast: Callable[[int, int, float, np.ndarray], np.ndarray]
          ) -> dict[str, dict[str, Any]]:
    """Per case: metrics on the points whose target time is after ``after_s`` and whose target exists.

    ``forecast(resource, horizon, quantile, x)`` returns forecasts in percent.
    """
    out: dict[str, dict[str, Any]] = {}
    for r in range(len(RESOURCES)):
        for h in range(len(HORIZON_STEPS)):
            y = points.y[:, r, h]
            mask = (points.target_s(h) > after_s) & ~np.isnan(y)
            x, y = points.x[mask], y[mask]
            entry: dict[str, Any] = {"points": int(mask.sum()), "vms": len(np.unique(points.vm[mask]))}
            if not len(y):
                out[case_name(r, h)] = entry
                continue
            p50 = forecast(r, h, 0.5, x)
            p90 = forecast(r, h, 0.9, x)
            w = wape(y, p50)
            entry.update({"mae": float(np.mean(np.abs(y - p50))), "wape": w,
                          "one_minus_wape": None if w is None else 1.0 - w,
                          "p90_coverage": float(np.mean(y <= p90)),
                          "p90_below_p50": float(np.mean(p90 < p50)), "mean_actual": float(np.mean(y))})
            base: dict[str, float | None] = {}
            for name in BASELINES:
                b = baseline(x, name, r, h)
                base[name] = wape(y, b)
                entry[f"mae_{name}"] = float(np.mean(np.abs(y - b)))
                entry[f"wape_{name}"] = base[name]
            valid = {k: v for k, v in base.items() if v is not None}
            if valid and w is not None:
                best = min(valid, key=lambda k: valid[k])
                entry["best_baseline"] = best
                entry["ratio_to_best_baseline"] = w / valid[best] if valid[best] > 0 else None
                entry["target_met"] = bool(valid[best] > 0 and w <= RATIO_TARGET * valid[best])
            out[case_name(r, h)] = entry
    return out


UNITS: Final = {"wape": "fraction", "one_minus_wape": "fraction", "p90_coverage": "fraction",
                "mae": "percent_points", "ratio_to_best_baseline": "ratio", "points": "points"}


def bench_rows(cases: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for case, m in cases.items():
        metrics = ["wape", "one_minus_wape", "p90_coverage", "mae", *(f"wape_{b}" for b in BASELINES),
                   "ratio_to_best_baseline", "points"]
        for metric in metrics:
            value = m.get(metric)
            if value is not None:
                unit = UNITS.get(metric, "fraction")
                rows.append({"bench": "forecast", "case": case, "metric": metric, "value": float(value), "unit": unit})
    return rows


def table(cases: dict[str, dict[str, Any]]) -> str:
    """Markdown table (docs and the CLI summary)."""
    head = ("| case | points | model WAPE (1 − WAPE) | persistence | moving avg 1 h | seasonal naive | "
            "ratio to best | p90 coverage | MAE (pp) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    lines = [head]

    def f(v: Any) -> str:
        return "n/a" if v is None else f"{v:.3f}"

    for case, m in cases.items():
        if m.get("wape") is None:
            lines.append(f"| {case} | {m['points']} | n/a | | | | | | |")
            continue
        ratio = m.get("ratio_to_best_baseline")
        mark = "" if ratio is None else (" ✓" if m.get("target_met") else " ✗")
        lines.append(f"| {case} | {m['points']:,} | {f(m['wape'])} ({f(m['one_minus_wape'])}) | "
                     f"{f(m['wape_persistence'])} | {f(m['wape_moving_average_1h'])} | {f(m['wape_seasonal_naive'])} | "
                     f"{f(ratio)}{mark} | {f(m['p90_coverage'])} | {f(m['mae'])} |")
    return "\n".join(lines)
