"""Train the failure-risk models: ingest -> dataset -> time split -> XGBoost per horizon -> ONNX + card."""

from __future__ import annotations

import datetime as dt
import platform
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import polars as pl
import xgboost as xgb

from featurelib.task_features import (
    FEATURE_SCHEMA_VERSION,
    TASK_FEATURE_NAMES,
    WINDOW_US,
    EventType,
    task_feature_schema_hash,
)
from training import ingest
from training.baselines import fit_baselines
from training.dataset import (
    ColdStartConfig,
    FailureDataset,
    TimeSplit,
    build_dataset,
    cold_start_views,
    time_split,
)
from training.errors import DataError
from training.export_onnx import TARGET_OPSET, export_with_parity, onnx_probability, save_booster, session
from training.failure_model import DEFAULT_PARAMS, FitConfig, fit_failure_model
from training.labels import PointConfig, data_bounds
from training.model_card import (
    BASELINES_FILE,
    CARD_FILE,
    file_list,
    fingerprint,
    horizon_file,
    set_current,
    sha256_file,
    write_json,
)
from training.progress import Progress
from training.report import evaluate_horizon, plot_pr_curves

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
    tail_fraction: float = 0.2
    points: PointConfig = field(default_factory=PointConfig)
    fit: FitConfig = field(default_factory=FitConfig)
    cold_start: ColdStartConfig = field(default_factory=ColdStartConfig)
    version: str | None = None
    command: str = ""
    set_current: bool = True


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


def _masks(ds: FailureDataset, split: TimeSplit, tail_fraction: float,
           gap_us: int) -> tuple[dict[str, np.ndarray], TimeSplit]:
    """Row masks (train = fit + gap + early-stopping tail; test) and the split of the training window."""
    t = ds.times()
    tail = time_split(int(t.min()), split.train_end_us, 1.0 - tail_fraction, gap_us)
    train = split.train_mask(t)
    masks = {"train": train, "fit": train & tail.train_mask(t), "tail": train & tail.test_mask(t),
             "test": split.test_mask(t)}
    return masks, tail


class _Extra:
    """Cold-start rows: they join the fit part and the refit, never the tail or the test."""

    def __init__(self, views: FailureDataset | None, n_features: int) -> None:
        self.views = views
        self.x = views.features() if views is not None else np.zeros((0, n_features), dtype=np.float32)
        self.t = views.times() if views is not None else np.zeros(0, dtype=np.int64)

    def rows(self, horizon_us: int, before_us: int) -> tuple[np.ndarray, np.ndarray]:
        if self.views is None:
            return self.x, np.zeros(0)
        y = self.views.labels(horizon_us)
        keep = ~np.isnan(y) & (self.t < before_us)
        return self.x[keep], y[keep]


def train_failure_models(cfg: TrainConfig, progress: Progress) -> Path:
    """Train, export and document one model version under ``cfg.out``; return its directory."""
    events, data_info = describe_inputs(cfg.task_events, cfg.job_events, progress)
    ds = build_dataset(events, cfg.horizons_us, cfg.failure_types, cfg.points, progress)
    if ds.frame.height == 0:
        raise DataError(f"{cfg.task_events}: no prediction points (shorter than the warm-up, or no task was "
                        "submitted and scheduled after time 0)")
    gap = max(cfg.horizons_us)
    t = ds.times()
    split = time_split(int(t.min()), ds.data_end_us, cfg.train_fraction, gap)
    masks, tail = _masks(ds, split, cfg.tail_fraction, gap)
    views, cuts = cold_start_views(events, split.train_end_us, cfg.horizons_us, cfg.failure_types, cfg.points,
                                   cfg.cold_start, progress)
    extra = _Extra(views, len(TASK_FEATURE_NAMES))
    cold = _cold_test_view(events, split, cfg, progress)
    created = dt.datetime.now(dt.UTC).replace(microsecond=0)
    version = cfg.version or f"{created:%Y%m%d-%H%M%S}-{data_info['fingerprint'][:8]}"
    final_dir = cfg.out / version
    if final_dir.exists():
        raise DataError(f"{final_dir} already exists; pass another --version")
    work = cfg.out / f".{version}.partial"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    progress(f"split: train now < {split.train_end_us / 1e6:,.0f}s ({int(masks['train'].sum()):,} points), "
             f"test now >= {split.test_start_us / 1e6:,.0f}s ({int(masks['test'].sum()):,} points), "
             f"gap {gap / 1e6:.0f}s")
    x = ds.features()
    metrics: dict[str, Any] = {}
    cold_metrics: dict[str, Any] = {}
    curves = {}
    baselines: dict[str, Any] = {}
    rounds: dict[str, Any] = {}
    parity: dict[str, float] = {}
    files: dict[str, str] = {}
    meta = {"feature_schema_hash": task_feature_schema_hash(), "feature_names": ",".join(TASK_FEATURE_NAMES),
            "model_version": version, "input_name": "input"}
    for h in cfg.horizons_us:
        key = f"{h // 1_000_000}s"
        y = ds.labels(h)
        known = ~np.isnan(y)
        m = {name: masks[name] & known for name in ("train", "fit", "tail", "test")}
        xe_fit, ye_fit = extra.rows(h, tail.train_end_us)
        xe_all, ye_all = extra.rows(h, split.train_end_us)
        progress(f"horizon {key}: train {int(m['train'].sum()):,} rows (+{len(ye_all):,} cold-start), positive "
                 f"rate {np.mean(y[m['train']]):.4f}; test positive rate {np.mean(y[m['test']]):.4f}")
        fitted = fit_failure_model(np.vstack([x[m["fit"]], xe_fit]), np.concatenate([y[m["fit"]], ye_fit]),
                                   x[m["tail"]], y[m["tail"]], np.vstack([x[m["train"]], xe_all]),
                                   np.concatenate([y[m["train"]], ye_all]), seed=cfg.seed, config=cfg.fit,
                                   progress=progress, label=f"horizon {key}")
        rounds[key] = {"rounds": fitted.rounds, "best_tail_round": fitted.best_tail_round,
                       "tail_aucpr": fitted.early_stopping_aucpr}
        baselines[key] = fit_baselines(x[m["train"]], y[m["train"]], cfg.seed)
        name = horizon_file(h)
        props = {**meta, "horizon_s": str(h // 1_000_000)}
        if masks["test"].any():  # parity on the validation window, whose ONNX scores are then evaluated
            check = export_with_parity(fitted.booster, x[masks["test"]], work / name, props)
            prob = check.onnx_probability[known[masks["test"]]]
        else:
            check = export_with_parity(fitted.booster, x[m["train"]], work / name, props)
            prob = onnx_probability(session(work / name), x[m["test"]])
        parity[key] = check.max_abs_diff
        files[name] = sha256_file(work / name)
        ubj = save_booster(fitted.booster, work / name.replace(".onnx", ".ubj"), x[masks["test"]][:20_000])
        files[ubj.name] = sha256_file(ubj)
        progress(f"horizon {key}: exported {name} (ONNX parity max |diff| {check.max_abs_diff:.2e} "
                 f"on {len(check.onnx_probability):,} rows)")
        metrics[key], curves[key] = evaluate_horizon(y[m["test"]], prob, x[m["test"]], baselines[key],
                                                     cfg.failure_types)
        _log_metrics(progress, key, metrics[key])
        if cold is not None:
            yc = cold.labels(h)
            kc = ~np.isnan(yc)
            xc = cold.features(kc)
            cold_metrics[key], _ = evaluate_horizon(yc[kc], onnx_probability(session(work / name), xc), xc,
                                                    baselines[key], cfg.failure_types)
            _log_metrics(progress, key, cold_metrics[key], "cold-start test")
    write_json(work / BASELINES_FILE, {"horizons": baselines, "failure_types": list(cfg.failure_types),
                                       "feature_schema_hash": task_feature_schema_hash()})
    report = {"kind": "validation", "model_version": version, "window": "heldout",
              "window_start_us": split.test_start_us, "horizons": metrics, "cold_start_horizons": cold_metrics}
    write_json(work / "validation_report.json", report)
    plot_pr_curves(curves, metrics, work / "validation_pr_curves.png", f"{MODEL_KIND} {version}: validation window")
    card = _card(cfg, version, created, data_info, ds, split, masks, tail.test_start_us, rounds, parity, files,
                 metrics)
    card["split"]["cold_start_views"] = {"cuts_us": cuts, "span_us": cfg.cold_start.span_us,
                                         "points": 0 if views is None else views.frame.height,
                                         "use": "extra training rows with history starting at each cut"}
    card["metrics"]["cold_start"] = {
        "window": "the same test window, with history starting one warm-up before it (as for later parts)",
        "horizons": cold_metrics}
    write_json(work / CARD_FILE, card)
    work.replace(final_dir)
    if cfg.set_current:
        set_current(cfg.out, version)
        progress(f"{cfg.out / 'CURRENT'} -> {version}")
    return final_dir


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
          split: TimeSplit, masks: dict[str, np.ndarray], tail_start: int, rounds: dict[str, Any],
          parity: dict[str, float],
          files: dict[str, str], metrics: dict[str, Any]) -> dict[str, Any]:
    names = [EventType(t).name for t in cfg.failure_types]
    return {
        "model": MODEL_KIND,
        "version": version,
        "created": created.isoformat(),
        "training_command": cfg.command,
        "data": {**data_info, "time_range_us": [ds.data_start_us, ds.data_end_us],
                 "prediction_points": ds.frame.height},
        "features": {"names": list(TASK_FEATURE_NAMES), "schema_version": FEATURE_SCHEMA_VERSION,
                     "schema_hash": task_feature_schema_hash(), "window_us": WINDOW_US,
                     "definition": "featurelib/task_features.py"},
        "label": {"failure_events": names, "failure_types": list(cfg.failure_types),
                  "horizons_s": [h // 1_000_000 for h in cfg.horizons_us],
                  "prediction_points": asdict(cfg.points),
                  "definition": "training/labels.py (next lifecycle event after now within H is a failure; "
                                "open runs past the data end and tasks present at time 0 are censored)"},
        "split": {"kind": "time", "train_fraction": cfg.train_fraction, "gap_us": max(cfg.horizons_us),
                  "train_end_us": split.train_end_us, "test_start_us": split.test_start_us,
                  "early_stopping_tail_start_us": tail_start,
                  "train_points": int(masks["train"].sum()), "test_points": int(masks["test"].sum())},
        "training": {"algorithm": "xgboost", "xgboost_version": xgb.__version__, "seed": cfg.seed,
                     "params": dict(DEFAULT_PARAMS) | dict(cfg.fit.params), "max_rounds": cfg.fit.max_rounds,
                     "min_rounds": cfg.fit.min_rounds,
                     "early_stopping_rounds": cfg.fit.early_stopping_rounds, "per_horizon": rounds,
                     "negative_rate": cfg.fit.negative_rate,
                     "refit_on_all_training_rows": True, "python": platform.python_version()},
        "onnx": {"sha256": files, "input_name": "input",
                 "input": f"input: float32[N, {len(TASK_FEATURE_NAMES)}], NaN = missing",
                 "xgboost_boosters": "horizon_<H>s.ubj: the same trees for native XGBoost (checked on reload)",
                 "output": "probabilities[:, 1] = P(failure within horizon)", "opset_ai_onnx_ml": 1,
                 "target_opset": TARGET_OPSET, "onnxruntime_version": onnxruntime.__version__,
                 "parity_max_abs_diff": parity, "parity_tolerance": 1e-5},
        "metrics": {"window": "time split, held-out test window", "horizons": metrics},
        "intended_use": "Rank running Borg-like tasks by the risk that their run ends in "
                        + "/".join(names) + " within each horizon; probabilities are not re-weighted.",
        "limitations": [
            "Request-side and event-history features only (no task usage).",
            "Trained on the first hours of one cluster trace; the base rate shifts over time, so "
            "probabilities drift; rankings are more stable than calibration.",
            "Tasks whose start lies before the data have no history and are not scored offline.",
        ],
    }
