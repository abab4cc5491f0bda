"""Train the failure-risk models: ingest -> dataset -> time split -> recipe per horizon -> ONNX + calibration + card."""

from __future__ import annotations

import datetime as dt
import platform
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import orjson
import polars as pl
import xgboost as xgb

from featurelib.drift_profile import build_profile, write_profile
from featurelib.task_features import (
    FEATURE_SCHEMA_VERSION,
    TASK_FEATURE_NAMES,
    WINDOW_US,
    EventType,
    task_feature_schema_hash,
)
from training import ingest
from training.baselines import fit_baselines
from training.dataset import FailureDataset, TimeSplit, build_dataset, time_split
from training.errors import DataError
from training.export_onnx import TARGET_OPSET, export_with_parity, onnx_probability, save_booster, session
from training.input_ranges import input_ranges
from training.labels import PointConfig, data_bounds
from training.metrics import calibration_summary
from training.model_card import (
    BASELINES_FILE,
    CARD_FILE,
    file_list,
    fingerprint,
    horizon_file,
    read_json,
    set_current,
    sha256_file,
    write_json,
)
from training.progress import Progress
from training.recipe import Recipe, fit_recipe
from training.report import evaluate_horizon, plot_pr_curves
from training.rolling import cold_view

MODEL_KIND = "failure-risk"


@dataclass(frozen=True, slots=True)
class TrainConfig:
    task_events: Path
    job_events: Path | None
    out: Path
    horizons_us: tuple[int, ...] = (300_000_000, 900_000_000, 3_600_000_000)
    failure_types: tuple[int, ...] = (int(EventType.FAIL),)
    seed: int = 0
    train_fraction: float = 0.7
    points: PointConfig = field(default_factory=PointConfig)
    recipe: Recipe = field(default_factory=Recipe)
    rolling_report: Path | None = None
    version: str | None = None
    command: str = ""
    set_current: bool = True


UNITS: dict[str, str] = {
    "requests": "cpu_request, memory_request (and machine sums of them): the Google 2011 trace's normalised scale, "
                "each resource divided by the largest machine's capacity (0..1)",
    "priority": "Borg priority 0..11 (free 0-1, middle 2-8, production 9-10, monitoring 11)",
    "scheduling_class": "0..3, 3 most latency-sensitive",
    "kubernetes": "featurelib/borg_units.py maps pods onto this scale in the risk stage: requests / the largest "
                  "node's allocatable (RISK_LARGEST_NODE_CPU, RISK_LARGEST_NODE_MEMORY_GIB), PriorityClass values "
                  "to the bands above, QoS to scheduling class; a value it cannot place is NaN and named "
                  "'<field>:unmapped' in risk.v2 out_of_range, and no agent acts on such a risk",
}
"""What the failure model's inputs mean (written into every card, so serving and operators read one definition)."""


def describe_inputs(task_dir: Path, job_dir: Path | None, progress: Progress) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Load task events (and validate job events); return them with a data description for cards/reports."""
    fmt, task_files = ingest.part_files(task_dir)
    events = ingest.load_task_events(task_dir, progress)
    entries = file_list(task_files, task_dir.parent)
    info: dict[str, Any] = {"task_events": {"dir": str(task_dir), "format": fmt, "files": entries,
                                            "rows": events.height}}
    if job_dir is not None:
        _, job_files = ingest.part_files(job_dir)
        jobs = ingest.load_job_events(job_dir, progress)
        job_entries = file_list(job_files, job_dir.parent)
        entries = entries + job_entries
        task_jobs = events.select("job_id").unique()
        covered = task_jobs.join(jobs.select("job_id").unique(), on="job_id", how="semi").height
        info["job_events"] = {"dir": str(job_dir), "files": job_entries, "rows": jobs.height,
                              "jobs": jobs["job_id"].n_unique(),
                              "task_event_jobs_with_job_events": covered, "task_event_jobs": task_jobs.height}
    info["fingerprint"] = fingerprint(entries)
    return events, info


class _ViewCache:
    """Cold views (history from one warm-up before the points) memoised by point range."""

    def __init__(self, events: pl.DataFrame, cfg: TrainConfig, progress: Progress) -> None:
        self._events, self._cfg, self._progress = events, cfg, progress
        self._cache: dict[tuple[int, int], FailureDataset] = {}
        self.points = 0

    def __call__(self, lo_us: int, hi_us: int) -> FailureDataset:
        if (lo_us, hi_us) not in self._cache:
            self._progress(f"cold-start view: points in [{lo_us / 1e6:,.0f}s, {hi_us / 1e6:,.0f}s)")
            view = cold_view(self._events, lo_us, hi_us, self._cfg.horizons_us, self._cfg.failure_types,
                             self._cfg.points, self._progress)
            self._cache[(lo_us, hi_us)] = view
            self.points += view.frame.height
        return self._cache[(lo_us, hi_us)]

    def feature_rows(self, before_us: int) -> list[np.ndarray]:
        return [v.features(v.times() < before_us) for v in self._cache.values()]


def train_failure_models(cfg: TrainConfig, progress: Progress) -> Path:
    """Train, calibrate, export and document one model version under ``cfg.out``; return its directory."""
    events, data_info = describe_inputs(cfg.task_events, cfg.job_events, progress)
    ds = build_dataset(events, cfg.horizons_us, cfg.failure_types, cfg.points, progress)
    if ds.frame.height == 0:
        raise DataError(f"{cfg.task_events}: no prediction points (shorter than the warm-up, or no task was "
                        "submitted and scheduled after time 0)")
    gap = max(cfg.horizons_us)
    t = ds.times()
    split = time_split(int(t.min()), ds.data_end_us, cfg.train_fraction, gap)
    train_mask, test_mask = split.train_mask(t), split.test_mask(t)
    views = _ViewCache(events, cfg, progress)
    cold = _cold_test_view(events, split, cfg, progress)
    rolling = _rolling_summary(cfg)
    created = dt.datetime.now(dt.UTC).replace(microsecond=0)
    version = cfg.version or f"{created:%Y%m%d-%H%M%S}-{data_info['fingerprint'][:8]}"
    final_dir = cfg.out / version
    if final_dir.exists():
        raise DataError(f"{final_dir} already exists; pass another --version")
    work = cfg.out / f".{version}.partial"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    progress(f"split: train now < {split.train_end_us / 1e6:,.0f}s ({int(train_mask.sum()):,} points), "
             f"test now >= {split.test_start_us / 1e6:,.0f}s ({int(test_mask.sum()):,} points), "
             f"gap {gap / 1e6:.0f}s")
    x = ds.features()
    metrics: dict[str, Any] = {}
    cold_metrics: dict[str, Any] = {}
    raw_calibration: dict[str, Any] = {}
    curves = {}
    baselines: dict[str, Any] = {}
    fits: dict[str, Any] = {}
    calibration: dict[str, Any] = {}
    parity: dict[str, float] = {}
    files: dict[str, str] = {}
    test_probs: dict[str, np.ndarray] = {}
    meta = {"feature_schema_hash": task_feature_schema_hash(), "feature_names": ",".join(TASK_FEATURE_NAMES),
            "model_version": version, "input_name": "input"}
    for h in cfg.horizons_us:
        key = f"{h // 1_000_000}s"
        y = ds.labels(h)
        known = ~np.isnan(y)
        m_train, m_test = train_mask & known, test_mask & known
        progress(f"horizon {key}: {int(m_train.sum()):,} training points, positive rate "
                 f"{np.mean(y[m_train]):.4f}; test positive rate {np.mean(y[m_test]):.4f}")
        fitted = fit_recipe(cfg.recipe, ds, train_mask, split.train_end_us, h, views, cfg.seed, progress,
                            f"horizon {key}")
        fits[key] = {"rounds": fitted.rounds, "best_tail_round": fitted.best_tail_round,
                     "tail_aucpr": fitted.tail_aucpr, "rows": fitted.rows}
        if fitted.calibration is not None:
            calibration[key] = fitted.calibration.to_card()
        baselines[key] = fit_baselines(x[m_train], y[m_train], cfg.seed)
        name = horizon_file(h)
        props = {**meta, "horizon_s": str(h // 1_000_000)}
        check_rows = x[test_mask] if test_mask.any() else x[m_train]
        check = export_with_parity(fitted.booster, check_rows, work / name, props)
        parity[key] = check.max_abs_diff
        files[name] = sha256_file(work / name)
        ubj = save_booster(fitted.booster, work / name.replace(".onnx", ".ubj"), check_rows[:20_000])
        files[ubj.name] = sha256_file(ubj)
        progress(f"horizon {key}: exported {name} (ONNX parity max |diff| {check.max_abs_diff:.2e} "
                 f"on {len(check.onnx_probability):,} rows)")
        raw = onnx_probability(session(work / name), x[m_test])
        prob = fitted.calibration.apply(raw) if fitted.calibration is not None else raw
        test_probs[key] = prob
        metrics[key], curves[key] = evaluate_horizon(y[m_test], prob, x[m_test], baselines[key], cfg.failure_types)
        raw_calibration[key] = calibration_summary(y[m_test], raw) if len(raw) else None
        _log_metrics(progress, key, metrics[key])
        if cold is not None:
            yc = cold.labels(h)
            kc = ~np.isnan(yc)
            xc = cold.features(kc)
            cold_metrics[key], _ = evaluate_horizon(yc[kc], fitted.predict(xc), xc, baselines[key],
                                                    cfg.failure_types)
            _log_metrics(progress, key, cold_metrics[key], "cold-start test")
    # the drift stage's reference (docs/drift.md): the held-out window's task features and published probabilities
    write_profile(work, build_profile(
        model="failure", model_version=version, x=x[test_mask], names=list(TASK_FEATURE_NAMES),
        outputs={f"probability_{k}": v for k, v in test_probs.items()},
        source="the held-out (test) window's prediction points: task features and calibrated probabilities per "
               "horizon, written at training time"))
    write_json(work / BASELINES_FILE, {"horizons": baselines, "failure_types": list(cfg.failure_types),
                                       "feature_schema_hash": task_feature_schema_hash()})
    report = {"kind": "validation", "model_version": version, "window": "heldout",
              "window_start_us": split.test_start_us, "horizons": metrics, "cold_start_horizons": cold_metrics}
    write_json(work / "validation_report.json", report)
    plot_pr_curves(curves, metrics, work / "validation_pr_curves.png", f"{MODEL_KIND} {version}: validation window")
    card = _card(cfg, version, created, data_info, ds, split, train_mask, test_mask, fits, parity, files, metrics)
    card["split"]["cold_start_views"] = {"views": cfg.recipe.cold_views, "span_us": cfg.recipe.cold_span_us,
                                         "points": views.points,
                                         "use": "extra training rows whose history starts late, like a later "
                                                "directory of part files"}
    card["metrics"]["cold_start"] = {
        "window": "the same test window, with history starting one warm-up before it (as for later parts)",
        "horizons": cold_metrics}
    card["calibration"] = {
        "method": "isotonic", "applied": "published probability = np.interp(onnx probability, x, y) per horizon",
        "fitted_on": "the training window's later tail (scores of a model fitted on the earlier part only); "
                     "never the test window",
        "horizons": calibration,
        "reliability_test_window": {k: m["calibration"] for k, m in metrics.items()},
        "reliability_test_window_uncalibrated": raw_calibration,
        "reliability_cold_start_test_window": {k: m["calibration"] for k, m in cold_metrics.items()},
    }
    keep = cfg.recipe.keep_mask()
    card["input_ranges"] = input_ranges(np.vstack([x[train_mask], *views.feature_rows(split.train_end_us)]),
                                        TASK_FEATURE_NAMES, keep)
    card["input_ranges_definition"] = ("0.1st and 99.9th percentiles of the training rows (NaN ignored) of every "
                                       "feature the trees use; never-observed and unused features are omitted")
    if rolling is not None:
        card["rolling_origin"] = rolling
    write_json(work / CARD_FILE, card)
    work.replace(final_dir)
    if cfg.set_current:
        set_current(cfg.out, version)
        progress(f"{cfg.out / 'CURRENT'} -> {version}")
    return final_dir


def _rolling_summary(cfg: TrainConfig) -> dict[str, Any] | None:
    """The rolling-origin figures of ``cfg.rolling_report`` (written by ``borgctl eval failure-rolling``)."""
    if cfg.rolling_report is None:
        return None
    doc = read_json(cfg.rolling_report)
    ro = doc.get("rolling_origin", {})
    return {"report": str(cfg.rolling_report), "command": doc.get("command"),
            "recipe_matches_this_training": ro.get("recipe") == orjson.loads(orjson.dumps(cfg.recipe.describe())),
            "config": ro.get("config"), "summary": ro.get("summary"),
            "folds": [{k: f[k] for k in ("origin_h", "gap_h", "train_end_h", "test_h")}
                      | {"horizons": {h: {"model_aucpr": m["model"]["aucpr"], "best_baseline": m["best_baseline"],
                                          "best_baseline_aucpr": m["best_baseline_aucpr"],
                                          "ratio": m["ratio_to_best_baseline"], "positives": m["positives"],
                                          "n": m["n"], "brier": m["brier"], "reliability": m["calibration"]}
                                      for h, m in f["horizons"].items()}}
                      for f in ro.get("folds", [])]}


def _cold_test_view(events: pl.DataFrame, split: TimeSplit, cfg: TrainConfig,
                    progress: Progress) -> FailureDataset | None:
    """The test window scored as a later directory of parts would be: no history before its warm-up."""
    cut = split.test_start_us - cfg.points.warmup_us
    view = events.filter(pl.col("time_us") >= cut)
    if view.filter(pl.col("time_us") >= split.test_start_us).height == 0:
        return None
    progress(f"cold-start test view: history from {cut / 1e6:,.0f}s only")
    end = data_bounds(events)[1]
    return build_dataset(view, cfg.horizons_us, cfg.failure_types, cfg.points, progress,
                         point_range=(split.test_start_us, end + 1), data_end_us=end)


def _log_metrics(progress: Progress, key: str, m: dict[str, Any], what: str = "test") -> None:
    def f(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.4f}"

    parts = [f"model {f(m['model']['aucpr'])}"] + [f"{n} {f(b['aucpr'])}" for n, b in m["baselines"].items()]
    progress(f"horizon {key}: {what} AUCPR " + ", ".join(parts) + f" (positive rate {f(m['positive_rate'])})")


def _card(cfg: TrainConfig, version: str, created: dt.datetime, data_info: dict[str, Any], ds: FailureDataset,
          split: TimeSplit, train_mask: np.ndarray, test_mask: np.ndarray, fits: dict[str, Any],
          parity: dict[str, float], files: dict[str, str], metrics: dict[str, Any]) -> dict[str, Any]:
    names = [EventType(t).name for t in cfg.failure_types]
    recipe = cfg.recipe
    return {
        "model": MODEL_KIND,
        "version": version,
        "created": created.isoformat(),
        "training_command": cfg.command,
        "data": {**data_info, "time_range_us": [ds.data_start_us, ds.data_end_us],
                 "prediction_points": ds.frame.height},
        "features": {"names": list(TASK_FEATURE_NAMES), "schema_version": FEATURE_SCHEMA_VERSION,
                     "schema_hash": task_feature_schema_hash(), "window_us": WINDOW_US,
                     "definition": "featurelib/task_features.py",
                     "unused_by_the_trees": list(recipe.dropped),
                     "unused_why": "cumulative counts and ages grow with the history behind now; a later window "
                                   "(history restarting) sees other ranges (training/recipe.py TIME_FEATURES)"},
        "label": {"failure_events": names, "failure_types": list(cfg.failure_types),
                  "horizons_s": [h // 1_000_000 for h in cfg.horizons_us],
                  "prediction_points": asdict(cfg.points),
                  "definition": "training/labels.py (next lifecycle event after now within H is a failure; "
                                "open runs past the data end and tasks present at time 0 are censored)"},
        "split": {"kind": "time", "train_fraction": cfg.train_fraction, "gap_us": max(cfg.horizons_us),
                  "train_end_us": split.train_end_us, "test_start_us": split.test_start_us,
                  "tail_fraction": recipe.tail_fraction,
                  "tail": "the last tail_fraction of the training window: early stopping and calibration; the "
                          "trees are fitted on points whose label window closes before it",
                  "train_points": int(train_mask.sum()), "test_points": int(test_mask.sum())},
        "training": {"algorithm": "xgboost", "xgboost_version": xgb.__version__, "seed": cfg.seed,
                     "recipe": recipe.describe(), "definition": "training/recipe.py", "per_horizon": fits,
                     "refit_on_all_training_rows": False, "python": platform.python_version()},
        "onnx": {"sha256": files, "input_name": "input",
                 "input": f"input: float32[N, {len(TASK_FEATURE_NAMES)}], NaN = missing",
                 "xgboost_boosters": "horizon_<H>s.ubj: the same trees for native XGBoost (checked on reload)",
                 "output": "probabilities[:, 1] = uncalibrated score; publish np.interp(score, calibration x, y)",
                 "opset_ai_onnx_ml": 1,
                 "target_opset": TARGET_OPSET, "onnxruntime_version": onnxruntime.__version__,
                 "parity_max_abs_diff": parity, "parity_tolerance": 1e-5},
        "metrics": {"window": "time split, held-out test window (published = calibrated probabilities)",
                    "horizons": metrics},
        "units": UNITS,
        "intended_use": "Rank running Borg-like tasks by the risk that their run ends in "
                        + "/".join(names) + " within each horizon; calibrated probabilities (see calibration).",
        "limitations": [
            "Request-side and event-history features only (no task usage).",
            "Trained on the first hours of one cluster trace; the base rate shifts over time, so calibration "
            "fitted on the training tail drifts on later windows (reliability tables below); rankings are more "
            "stable than probabilities.",
            "Tasks whose start lies before the data have no history and are not scored offline.",
        ],
    }
