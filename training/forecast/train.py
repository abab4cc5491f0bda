"""``borgctl train forecast``: load per-VM series, split VMs and time, fit quantile boosters, export, card.

Split: a seeded fraction of the VMs is held out entirely (never trained on, never used for early
stopping); the other VMs train on targets up to ``train_end`` (default 2013-09-01 UTC: July and
August) and early-stop on their targets after it (September). Reported figures: held-out VMs,
targets after ``train_end`` — VMs never seen, in a later window — scored through the ONNX files
(the served artifact), with the same code ``borgctl eval forecast`` runs.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import platform
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import onnxruntime
import xgboost as xgb

from featurelib.load_features import (
    FEATURE_SCHEMA_VERSION,
    HORIZON_STEPS,
    LOAD_FEATURE_NAMES,
    RESOURCES,
    STEP_S,
    load_feature_schema_hash,
)
from training.errors import DataError
from training.forecast import bitbrains
from training.forecast.dataset import BASELINES, Points, base_index, build_points
from training.forecast.metrics import bench_rows, score, table
from training.forecast.model import QUANTILES, Params, export, fit_quantile, onnx_forecast
from training.model_card import CARD_FILE, file_list, fingerprint, set_current, sha256_file, write_json
from training.progress import Progress

MODEL_KIND: Final = "load-forecast"
REPORT_FILE: Final = "validation_report.json"
CITATION: Final = ("S. Shen, V. van Beek, A. Iosup, \"Statistical Characterization of Business-Critical Workloads "
                   "Hosted in Cloud Datacenters\", CCGrid 2015. Trace: Grid Workloads Archive GWA-T-12 Bitbrains "
                   "(rnd), TU Delft; free for research use with citation.")
DEFAULT_TRAIN_END: Final = "2013-09-01T00:00:00+00:00"


@dataclass(frozen=True, slots=True)
class ForecastConfig:
    data: Path
    out: Path
    seed: int = 0
    train_end_s: int = int(dt.datetime.fromisoformat(DEFAULT_TRAIN_END).timestamp())
    holdout_fraction: float = 0.2
    max_vms: int | None = None
    train_rows_per_vm: int = 400
    val_rows_per_vm: int = 100
    params: Params = field(default_factory=Params)
    version: str | None = None
    command: str = ""
    set_current: bool = True


def model_file(resource: int, h: int, q: float) -> str:
    return f"{RESOURCES[resource]}_{HORIZON_STEPS[h] * STEP_S // 60}min_p{round(q * 100)}.onnx"


def series_fingerprint(series: bitbrains.Series) -> str:
    """Content identity of one file's rows (every time, CPU and memory value), so eval can leave out the
    training VMs without trusting names. Hashing a prefix is not enough: idle VMs share timestamps and
    zero CPU for days."""
    digest = hashlib.sha256(np.ascontiguousarray(series.time_s, dtype=np.int64).tobytes())
    digest.update(np.ascontiguousarray(series.cpu_pct, dtype=np.float64).tobytes())
    digest.update(np.ascontiguousarray(series.mem_pct, dtype=np.float64).tobytes())
    return digest.hexdigest()[:24]


def file_fingerprints(files: list[Path]) -> list[str]:
    out = []
    for f in files:
        t, cpu, mem = bitbrains.read_file(f)
        out.append(series_fingerprint(bitbrains.Series("", t, cpu, mem, (f,))))
    return out


def _sample(rng: np.random.Generator, mask: np.ndarray, n: int) -> np.ndarray:
    idx = np.flatnonzero(mask)
    if len(idx) > n:
        idx = rng.choice(idx, size=n, replace=False)
    keep = np.zeros(len(mask), dtype=bool)
    keep[idx] = True
    return keep


def split_vms(names: list[str], fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """(training VMs, held-out VMs): a seeded permutation of the sorted names; at least one of each."""
    ordered = sorted(names)
    perm = np.random.default_rng(seed).permutation(len(ordered))
    n_out = min(len(ordered) - 1, max(1, round(fraction * len(ordered))))
    held = sorted(ordered[i] for i in perm[:n_out])
    train = sorted(ordered[i] for i in perm[n_out:])
    return train, held


def train_forecast(cfg: ForecastConfig, progress: Progress) -> Path:
    started = time.perf_counter()
    files = bitbrains.vm_files(cfg.data)
    names = sorted(files)
    if cfg.max_vms is not None and len(names) > cfg.max_vms:
        pick = np.random.default_rng(cfg.seed + 1).permutation(len(names))[: cfg.max_vms]
        names = sorted(names[i] for i in pick)
    if len(names) < 2:
        raise DataError(f"{cfg.data}: {len(names)} VM(s); need at least 2 (some are held out)")
    train_vms, held_vms = split_vms(names, cfg.holdout_fraction, cfg.seed)
    progress(f"{len(names)} VMs: {len(train_vms)} train, {len(held_vms)} held out (seed {cfg.seed}); "
             f"train end {dt.datetime.fromtimestamp(cfg.train_end_s, dt.UTC).isoformat()}")
    rng = np.random.default_rng(cfg.seed)
    end = cfg.train_end_s
    last_h = len(HORIZON_STEPS) - 1
    series = []
    fps: list[str] = []
    for i, vm in enumerate(train_vms + held_vms):
        s = bitbrains.load_series(vm, files[vm])
        series.append(s)
        if vm in train_vms:
            fps.extend(file_fingerprints(list(s.files)))
        if (i + 1) % 50 == 0:
            progress(f"read {i + 1}/{len(names)} VMs")
    train_series, held_series = series[: len(train_vms)], series[len(train_vms):]
    seen = set(fps)
    clashes = sorted(s.vm for s in held_series if seen.intersection(file_fingerprints(list(s.files))))
    if clashes:
        progress(f"warning: held-out VM(s) {', '.join(clashes)} have a file identical to a training VM's")

    def select_train(now_s: np.ndarray, y: np.ndarray) -> np.ndarray:
        fit = _sample(rng, now_s + HORIZON_STEPS[0] * STEP_S <= end, cfg.train_rows_per_vm)
        val = _sample(rng, now_s + HORIZON_STEPS[last_h] * STEP_S > end, cfg.val_rows_per_vm)
        keep: np.ndarray = fit | val
        return keep

    def select_held(now_s: np.ndarray, y: np.ndarray) -> np.ndarray:
        held: np.ndarray = now_s + HORIZON_STEPS[last_h] * STEP_S > end
        return held

    pts = build_points(train_series, select_train, progress)
    test = build_points(held_series, select_held, progress)
    progress(f"points: {len(pts):,} from training VMs (fit + early stopping), {len(test):,} from held-out VMs")
    version = cfg.version or (dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S") + "-" + fingerprint(
        file_list([f for vm in names for f in files[vm]], cfg.data))[:8])
    cfg.out.mkdir(parents=True, exist_ok=True)
    work = cfg.out / f".{version}.partial"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    meta_common = {"model_version": version, "feature_schema_hash": load_feature_schema_hash(),
                   "feature_names": ",".join(LOAD_FEATURE_NAMES), "units": "percent"}
    fitted: dict[str, dict[str, Any]] = {}
    for r in range(len(RESOURCES)):
        col = base_index(r)
        for h in range(len(HORIZON_STEPS)):
            y = pts.y[:, r, h]
            tgt = pts.target_s(h)
            fit = (tgt <= end) & ~np.isnan(y)
            val = (tgt > end) & ~np.isnan(y)
            if not fit.any():
                raise DataError(f"{cfg.data}: no training targets before the train end for {RESOURCES[r]} "
                                f"+{HORIZON_STEPS[h] * STEP_S // 60} min")
            base = pts.x[:, col].astype(np.float64)
            check = test.x[: 20_000] if len(test) else pts.x[:20_000]
            for q in QUANTILES:
                booster = fit_quantile(pts.x[fit], y[fit] - base[fit], pts.x[val], y[val] - base[val], q,
                                       cfg.params, cfg.seed)
                name = model_file(r, h, q)
                meta = {**meta_common, "resource": RESOURCES[r], "horizon_s": str(HORIZON_STEPS[h] * STEP_S),
                        "quantile": str(q)}
                diff = export(booster, check, col, work / name, meta)
                fitted[name] = {"resource": RESOURCES[r], "horizon_s": HORIZON_STEPS[h] * STEP_S, "quantile": q,
                                "rounds": booster.num_boosted_rounds(), "train_rows": int(fit.sum()),
                                "early_stopping_rows": int(val.sum()), "onnx_parity_max_abs_diff": diff}
                progress(f"{name}: {booster.num_boosted_rounds()} rounds on {int(fit.sum()):,} rows, "
                         f"parity {diff:.2g}")
    sessions = {name: (work / name).read_bytes() for name in fitted}

    def forecast(r: int, h: int, q: float, x: np.ndarray) -> np.ndarray:
        return onnx_forecast(sessions[model_file(r, h, q)], x)

    cases = score(test, end, forecast)
    progress("held-out VMs, targets after the train end:\n" + table(cases))
    report = {"created": _now(), "command": cfg.command, "model_version": version,
              "scope": "held-out VMs (never trained on), targets after train_end", "cases": cases,
              "results": bench_rows(cases)}
    write_json(work / REPORT_FILE, report)
    card = {
        "kind": MODEL_KIND, "version": version, "created": _now(), "command": cfg.command,
        "training_seconds": round(time.perf_counter() - started, 1),
        "data": {"path": str(cfg.data), "fingerprint": fingerprint(file_list([f for vm in names for f in files[vm]],
                                                                              cfg.data)),
                 "vms": len(names), "citation": CITATION,
                 "licence": "GWA-T-12 Bitbrains: free for research use with citation (Grid Workloads Archive)"},
        "features": {"schema_version": FEATURE_SCHEMA_VERSION, "schema_hash": load_feature_schema_hash(),
                     "names": list(LOAD_FEATURE_NAMES), "definition": "featurelib/load_features.py",
                     "bucket_s": STEP_S},
        "targets": {"resources": {"cpu": "CPU usage [%] (0..100)", "mem": "Memory usage / capacity * 100 (0..100)"},
                    "horizons_s": [s * STEP_S for s in HORIZON_STEPS], "quantiles": list(QUANTILES),
                    "value": "mean of the 300 s bucket ending horizon_s after the end of the last closed bucket"},
        "serving": {"input": "input float32[N, F] (features.names order, NaN = missing)",
                    "output": "forecast float32[N, 1], percent; the graph adds <r>_last to the trees' change",
                    "files": {name: {k: v for k, v in m.items() if k in ("resource", "horizon_s", "quantile")}
                              for name, m in fitted.items()},
                    "note": "p90 can fall below p50 on a few rows (independent boosters); take max(p50, p90)"},
        "split": {"seed": cfg.seed, "holdout_fraction": cfg.holdout_fraction,
                  "train_end": dt.datetime.fromtimestamp(end, dt.UTC).isoformat(), "train_end_s": end,
                  "train_vms": train_vms, "heldout_vms": held_vms,
                  "train_vm_fingerprints": sorted(set(fps)), "heldout_vms_with_a_training_file": clashes,
                  "rule": "fit on training VMs' targets <= train_end; early-stop on their targets > train_end; "
                          "report held-out VMs' targets > train_end"},
        "sampling": {"train_rows_per_vm": cfg.train_rows_per_vm, "early_stopping_rows_per_vm": cfg.val_rows_per_vm,
                     "max_vms": cfg.max_vms},
        "baselines": {"persistence": "last bucket", "moving_average_1h": "mean of the valid last 12 buckets",
                      "seasonal_naive": "the bucket 24 h before the target (persistence when it is empty)"},
        "params": {**asdict(cfg.params), "objective": "reg:quantileerror", "target": "y[k+S] - y[k]"},
        "models": fitted,
        "metrics": {"scope": report["scope"], "cases": cases},
        "environment": {"python": platform.python_version(), "xgboost": xgb.__version__,
                        "onnxruntime": onnxruntime.__version__},
        "sha256": {name: sha256_file(work / name) for name in [*fitted, REPORT_FILE]},
    }
    write_json(work / CARD_FILE, card)
    final = cfg.out / version
    if final.exists():
        raise DataError(f"{final} already exists (pass another --version)")
    work.rename(final)
    if cfg.set_current:
        set_current(cfg.out, version)
    progress(f"model {version} written in {time.perf_counter() - started:.0f}s")
    return final


def _now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()


__all__ = ["BASELINES", "ForecastConfig", "Points", "train_forecast"]
