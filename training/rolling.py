"""Rolling-origin evaluation of the failure-model training recipe: train on earlier hours, test later.

A fold has an *origin*: everything the recipe trains on (features and labels) is
settled by then. Training points have ``now < origin - max(H)``, so every training
label window ``(now, now + H]`` ends at or before the origin. The test window
starts ``gap`` after the origin and lasts ``test_span``. Test rows are scored as a
later directory of part files is: features only see events from one warm-up
before the test window (``cold`` history), exactly what ``borgctl eval failure``
does on later parts of the trace.

The recipe (``training.recipe``) is retrained per fold; the figures say how much
of the model's edge over the best baseline survives a gap, per horizon.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import polars as pl

from training.baselines import BASELINES, failed_before, fit_baselines, score_baselines
from training.dataset import FailureDataset, build_dataset
from training.errors import DataError
from training.labels import PointConfig, data_bounds
from training.metrics import calibration_table, ranking_metrics
from training.progress import Progress
from training.recipe import FittedRecipe, Recipe, fit_recipe

HOUR_US: Final = 3_600_000_000


@dataclass(frozen=True, slots=True)
class Fold:
    """Train on ``now < train_end_us``; test on ``test_start_us <= now < test_end_us``."""

    origin_us: int
    train_end_us: int
    test_start_us: int
    test_end_us: int
    gap_us: int

    @property
    def name(self) -> str:
        return f"origin {self.origin_us / HOUR_US:.1f}h gap {self.gap_us / HOUR_US:.1f}h"

    def train_mask(self, times: np.ndarray) -> np.ndarray:
        return times < self.train_end_us

    def test_mask(self, times: np.ndarray) -> np.ndarray:
        return (times >= self.test_start_us) & (times < self.test_end_us)


def rolling_folds(first_us: int, last_us: int, max_horizon_us: int, *, origins: tuple[float, ...],
                  gaps_us: tuple[int, ...], test_span_us: int) -> list[Fold]:
    """Folds for each origin (fraction of ``[first_us, last_us]``) and gap that fit in the data.

    ``last_us`` is the end of the data: a test window ends at least ``max_horizon_us`` before it,
    so every test label is known. Folds that do not fit are left out.
    """
    if any(g < 0 for g in gaps_us) or test_span_us <= 0 or max_horizon_us <= 0:
        raise ValueError("gaps must be >= 0, test span and horizon > 0")
    if any(not 0.0 < f < 1.0 for f in origins):
        raise ValueError("origins are fractions of the data span in (0, 1)")
    folds = []
    for frac in sorted(origins):
        origin = first_us + int((last_us - first_us) * frac)
        train_end = origin - max_horizon_us
        if train_end <= first_us:
            continue
        for gap in sorted(gaps_us):
            start = origin + gap
            end = start + test_span_us
            if end + max_horizon_us <= last_us:
                folds.append(Fold(origin, train_end, start, end, gap))
    return folds


def cold_view(events: pl.DataFrame, lo_us: int, hi_us: int, horizons_us: tuple[int, ...],
              failure_types: tuple[int, ...], points: PointConfig, progress: Progress) -> FailureDataset:
    """Points in ``[lo_us, hi_us)`` whose features see events from ``lo_us - warmup`` only."""
    cut = lo_us - points.warmup_us
    last = min(hi_us + max(horizons_us), data_bounds(events)[1])
    view = events.filter((pl.col("time_us") >= cut) & (pl.col("time_us") <= last))
    return build_dataset(view, horizons_us, failure_types, points, progress, point_range=(lo_us, hi_us),
                         data_end_us=last)


@dataclass(frozen=True, slots=True)
class RollingConfig:
    horizons_us: tuple[int, ...] = (300_000_000, 900_000_000, 3_600_000_000)
    failure_types: tuple[int, ...] = (3,)
    origins: tuple[float, ...] = (0.4, 0.55, 0.7)
    gaps_us: tuple[int, ...] = (0, 2 * HOUR_US, 4 * HOUR_US)
    test_span_us: int = 2 * HOUR_US
    seed: int = 0
    points: PointConfig = field(default_factory=PointConfig)


def best_baseline(metrics: dict[str, Any]) -> tuple[str, float | None]:
    """The baseline with the highest AUCPR (``positive_rate`` included: a constant score)."""
    scored = [(name, b["aucpr"]) for name, b in metrics.items() if b["aucpr"] is not None]
    if not scored:
        return "none", None
    return max(scored, key=lambda item: item[1])


class _Views:
    """Cold views memoised by their point range (folds share test windows and training cuts)."""

    def __init__(self, events: pl.DataFrame, cfg: RollingConfig, progress: Progress) -> None:
        self._events, self._cfg, self._progress = events, cfg, progress
        self._cache: dict[tuple[int, int], FailureDataset] = {}

    def __call__(self, lo_us: int, hi_us: int) -> FailureDataset:
        key = (lo_us, hi_us)
        if key not in self._cache:
            self._progress(f"cold view: points in [{lo_us / HOUR_US:.2f}h, {hi_us / HOUR_US:.2f}h)")
            self._cache[key] = cold_view(self._events, lo_us, hi_us, self._cfg.horizons_us,
                                         self._cfg.failure_types, self._cfg.points, self._progress)
        return self._cache[key]


def evaluate_fold(fold: Fold, warm: FailureDataset, views: _Views, recipe: Recipe, cfg: RollingConfig,
                  progress: Progress, fits: dict[tuple[int, int], FittedRecipe] | None = None) -> dict[str, Any]:
    """Fit the recipe on the fold's training rows; score model and baselines on its cold test window."""
    test = views(fold.test_start_us, fold.test_end_us)
    x_test = test.features()
    t = warm.times()
    train = fold.train_mask(t)
    out: dict[str, Any] = {"origin_h": fold.origin_us / HOUR_US, "gap_h": fold.gap_us / HOUR_US,
                           "train_end_h": fold.train_end_us / HOUR_US,
                           "test_h": [fold.test_start_us / HOUR_US, fold.test_end_us / HOUR_US],
                           "horizons": {}}
    for h in cfg.horizons_us:
        key = f"{h // 1_000_000}s"
        fits = {} if fits is None else fits
        if (fold.train_end_us, h) not in fits:  # folds of one origin share their training rows
            fits[(fold.train_end_us, h)] = fit_recipe(recipe, warm, train, fold.train_end_us, h, views, cfg.seed,
                                                      progress, f"origin {fold.origin_us / HOUR_US:.1f}h {key}")
        fitted = fits[(fold.train_end_us, h)]
        y = test.labels(h)
        known = ~np.isnan(y)
        yk, xk = y[known], x_test[known]
        prob = fitted.predict(xk)
        y_train = warm.labels(h)[train]
        params = fit_baselines(warm.features(train)[~np.isnan(y_train)], y_train[~np.isnan(y_train)], cfg.seed)
        base = {name: ranking_metrics(yk, s) for name, s in
                score_baselines(params, xk, cfg.failure_types).items() if name in BASELINES}
        name, best = best_baseline(base)
        model = ranking_metrics(yk, prob)
        ratio = None if best is None or model["aucpr"] is None or best == 0 else model["aucpr"] / best
        split = repeat_split(yk, prob, base["failed_before"], failed_before(xk, cfg.failure_types), best)
        out["horizons"][key] = {
            "n": int(known.sum()), "positives": int(yk.sum()), "positive_rate": float(yk.mean()) if len(yk) else None,
            "model": model, "baselines": base, "best_baseline": name, "best_baseline_aucpr": best,
            "ratio_to_best_baseline": ratio, "tail_aucpr": fitted.tail_aucpr, "repeat_split": split,
            "calibration": calibration_table(yk, prob),
            "brier": float(np.mean((prob - yk) ** 2)) if len(yk) else None,
        }
        progress(f"{fold.name} {key}: AUCPR model {_f(model['aucpr'])} vs {name} {_f(best)} "
                 f"(ratio {_f(ratio)}), tail {_f(fitted.tail_aucpr)}, positives {int(yk.sum())}")
    return out


def repeat_split(y: np.ndarray, model: np.ndarray, failed_before_metrics: dict[str, Any], repeat: np.ndarray,
                 best_baseline_aucpr: float | None) -> dict[str, Any]:
    """Where the positives are: tasks that already failed (``repeat``) or first failures, and a ceiling.

    ``ceiling_aucpr`` ranks every repeat row perfectly (its positives first, its negatives last)
    and the first-failure rows by the model in between: the most any model can reach by timing
    crash loops better without predicting first failures better. ``failed_before_metrics`` is
    the baseline's metrics on all rows (only its AUCPR is repeated here, for reading convenience).
    """
    first = ~repeat
    ceiling = np.where(repeat, np.where(y == 1, 2.0, -1.0), model)
    c = ranking_metrics(y, ceiling)["aucpr"]
    return {
        "rows_repeat": float(repeat.mean()) if len(y) else None,
        "positives_repeat_share": float(y[repeat].sum() / y.sum()) if y.sum() else None,
        "model_aucpr_repeat": ranking_metrics(y[repeat], model[repeat])["aucpr"],
        "model_aucpr_first_failure": ranking_metrics(y[first], model[first])["aucpr"],
        "first_failure_positive_rate": float(y[first].mean()) if first.any() else None,
        "failed_before_aucpr": failed_before_metrics["aucpr"],
        "ceiling_aucpr": c,
        "ceiling_ratio": None if c is None or not best_baseline_aucpr else c / best_baseline_aucpr,
    }


def rolling_evaluation(events: pl.DataFrame, recipe: Recipe, cfg: RollingConfig, progress: Progress,
                       warm: FailureDataset | None = None) -> dict[str, Any]:
    """Every fold of ``cfg`` for one recipe; ``warm`` reuses a dataset built from all of ``events``."""
    if warm is None:
        warm = build_dataset(events, cfg.horizons_us, cfg.failure_types, cfg.points, progress)
    if warm.frame.height == 0:
        raise DataError("no prediction points: the data is shorter than the warm-up")
    t = warm.times()
    folds = rolling_folds(int(t.min()), warm.data_end_us, max(cfg.horizons_us), origins=cfg.origins,
                          gaps_us=cfg.gaps_us, test_span_us=cfg.test_span_us)
    if not folds:
        raise DataError("the data is too short for any rolling-origin fold; use fewer hours of gap or span")
    progress(f"{len(folds)} folds: " + "; ".join(f.name for f in folds))
    views = _Views(events, cfg, progress)
    results = []
    fits: dict[tuple[int, int], FittedRecipe] = {}
    for i, fold in enumerate(folds, 1):
        progress(f"fold {i}/{len(folds)}: {fold.name}")
        results.append(evaluate_fold(fold, warm, views, recipe, cfg, progress, fits))
    config = {"origins": list(cfg.origins), "gaps_h": [g / HOUR_US for g in cfg.gaps_us],
              "test_span_h": cfg.test_span_us / HOUR_US, "seed": cfg.seed,
              "horizons_s": [h // 1_000_000 for h in cfg.horizons_us], "failure_types": list(cfg.failure_types),
              "test_history": "cold: features see events from one warm-up before the test window only"}
    return {"recipe": recipe.describe(), "config": config, "folds": results, "summary": summarise(results)}


def summarise(folds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per horizon and gap: mean model AUCPR, best-baseline AUCPR and ratio, and the worst ratio."""
    out: dict[str, Any] = {}
    for fold in folds:
        for key, m in fold["horizons"].items():
            row = out.setdefault(key, {}).setdefault(f"{fold['gap_h']:g}h", {"model": [], "baseline": [],
                                                                              "ratio": [], "ceiling": []})
            if m["ratio_to_best_baseline"] is not None:
                row["model"].append(m["model"]["aucpr"])
                row["baseline"].append(m["best_baseline_aucpr"])
                row["ratio"].append(m["ratio_to_best_baseline"])
            ceiling = m.get("repeat_split", {}).get("ceiling_ratio")
            if ceiling is not None:
                row["ceiling"].append(ceiling)
    return {key: {gap: {"folds": len(v["ratio"]), "model_aucpr": _mean(v["model"]),
                        "best_baseline_aucpr": _mean(v["baseline"]), "ratio_mean": _mean(v["ratio"]),
                        "ratio_min": min(v["ratio"]) if v["ratio"] else None,
                        "ceiling_ratio_mean": _mean(v["ceiling"])}
                  for gap, v in gaps.items()} for key, gaps in out.items()}


def bench_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """``{bench, case, metric, value, unit}`` rows (the project's bench format)."""
    rows: list[dict[str, Any]] = []
    for key, gaps in report["summary"].items():
        for gap, s in gaps.items():
            case = f"horizon {key} gap {gap}"
            for metric in ("model_aucpr", "best_baseline_aucpr", "ratio_mean", "ratio_min", "ceiling_ratio_mean"):
                if s[metric] is not None:
                    rows.append({"bench": "failure-rolling", "case": case, "metric": metric,
                                 "value": float(s[metric]), "unit": "ratio" if "ratio" in metric else "aucpr"})
    return rows


def write_report(path: Path, report: dict[str, Any], machine: dict[str, Any], command: str) -> None:
    """Bench format (``machine`` + ``results`` rows) plus the full per-fold figures."""
    import orjson

    doc = {"machine": machine, "created": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
           "command": command, "results": bench_rows(report), "rolling_origin": report}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n")


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _f(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"
