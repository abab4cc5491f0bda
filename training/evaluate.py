"""Evaluate a shipped failure model (its ONNX files) and its baselines on any directory of part files.

Window: ``heldout`` scores only prediction points at or after the model's
test-window start (use it on the data the model was trained from), ``all``
scores every point (later parts, other traces). ``auto`` picks ``heldout``
when any input part file (same name and size) was used in training.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Final

import numpy as np

from featurelib.task_features import task_feature_schema_hash
from training.calibration import Calibration
from training.dataset import build_dataset
from training.errors import DataError, ModelDirError
from training.export_onnx import onnx_probability, session
from training.ingest import part_files
from training.labels import PointConfig
from training.model_card import BASELINES_FILE, CARD_FILE, horizon_file, read_json, resolve_model_dir, write_json
from training.progress import Progress
from training.report import evaluate_horizon, plot_pr_curves
from training.train import describe_inputs

WINDOWS: Final = ("auto", "heldout", "all")


def pr_png_path(report_path: Path) -> Path:
    """The PR-curve PNG written beside the report: ``report.json`` -> ``report.pr_curves.png``."""
    return report_path.with_name(report_path.stem + ".pr_curves.png")


def _window(choice: str, card: dict[str, Any], info: dict[str, Any]) -> tuple[str, int | None]:
    trained = {(Path(e["name"]).name, e["bytes"]) for e in card["data"]["task_events"]["files"]}
    overlap = any((Path(e["name"]).name, e["bytes"]) in trained for e in info["task_events"]["files"])
    chosen = ("heldout" if overlap else "all") if choice == "auto" else choice
    return chosen, int(card["split"]["test_start_us"]) if chosen == "heldout" else None


def evaluate_failure(task_events: Path, job_events: Path | None, model: Path, out: Path, window: str,
                     progress: Progress) -> dict[str, Any]:
    """Score the model and baselines per horizon; write ``out`` (JSON) and the PR-curve PNG beside it."""
    part_files(task_events)  # report a bad data path before a bad model path
    if job_events is not None:
        part_files(job_events)
    model_dir = resolve_model_dir(model)
    card = read_json(model_dir / CARD_FILE)
    baselines = read_json(model_dir / BASELINES_FILE)
    if card["features"]["schema_hash"] != task_feature_schema_hash():
        raise ModelDirError(f"{model_dir}: trained with feature schema {card['features']['schema_hash'][:12]}, "
                            f"this code computes {task_feature_schema_hash()[:12]}; retrain the model")
    progress(f"model {card['version']} from {model_dir}")
    events, info = describe_inputs(task_events, job_events, progress)
    horizons = tuple(int(h) * 1_000_000 for h in card["label"]["horizons_s"])
    failure_types = tuple(int(t) for t in card["label"]["failure_types"])
    ds = build_dataset(events, horizons, failure_types, PointConfig(**card["label"]["prediction_points"]), progress)
    chosen, start = _window(window, card, info)
    t = ds.times()
    in_window = t >= start if start is not None else np.ones(len(t), dtype=bool)
    progress(f"window {chosen}: {int(in_window.sum()):,} of {len(t):,} prediction points")
    if not in_window.any():
        raise DataError(f"{task_events}: no prediction points in the {chosen} window")
    x = ds.features(in_window)
    metrics: dict[str, Any] = {}
    curves = {}
    for h in horizons:
        key = f"{h // 1_000_000}s"
        y = ds.labels(h)[in_window]
        known = ~np.isnan(y)
        prob = onnx_probability(session(model_dir / horizon_file(h)), x[known])
        table = card.get("calibration", {}).get("horizons", {}).get(key)
        if table is not None:  # what the risk service publishes
            prob = Calibration.from_card(table).apply(prob)
        metrics[key], curves[key] = evaluate_horizon(y[known], prob, x[known], baselines["horizons"][key],
                                                     failure_types)
        m = metrics[key]
        progress(f"horizon {key}: AUCPR model {_f(m['model']['aucpr'])} vs "
                 + ", ".join(f"{n} {_f(b['aucpr'])}" for n, b in m["baselines"].items())
                 + f"; positive rate {_f(m['positive_rate'])} over {m['n']:,} points")
    report = {
        "kind": "evaluation",
        "created": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        "model": {"version": card["version"], "dir": str(model_dir), "failure_events": card["label"]["failure_events"],
                  "feature_schema_hash": card["features"]["schema_hash"]},
        "data": {**info, "time_range_us": [ds.data_start_us, ds.data_end_us], "prediction_points": len(t)},
        "window": {"mode": chosen, "requested": window, "start_us": start, "points": int(in_window.sum())},
        "model_beats_every_baseline_aucpr_at_every_horizon": all(
            m["model_beats_every_baseline_aucpr"] for m in metrics.values()),
        "horizons": metrics,
        "pr_curves_png": pr_png_path(out).name,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, report)
    plot_pr_curves(curves, metrics, pr_png_path(out), f"failure model {card['version']} on {task_events} ({chosen})")
    return report


def _f(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4f}"
