"""``borgctl eval forecast``: score a shipped forecast model (its ONNX files) and the baselines on any directory.

Rows are Bitbrains-layout series (``training/forecast/bitbrains.py``). By default only targets after
the model's training window (card ``split.train_end``) are scored (``--from`` overrides), and VMs the
model trained on are left out: a VM is recognised by the content of its files (card
``split.train_vm_fingerprints``), never by its name (``--include-training-vms`` scores them too).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from featurelib.load_features import HORIZON_STEPS, STEP_S, load_feature_schema_hash
from training.errors import ModelDirError
from training.forecast import bitbrains
from training.forecast.dataset import build_points
from training.forecast.metrics import bench_rows, score
from training.forecast.model import onnx_forecast
from training.forecast.train import file_fingerprints, model_file
from training.model_card import read_json, resolve_model_dir, sha256_file
from training.progress import Progress


def parse_time(text: str) -> int:
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not an ISO time: {text!r} (e.g. 2013-09-01T00:00:00Z)") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return int(value.timestamp())


def load_model(path: Path) -> tuple[Path, dict[str, Any], dict[str, bytes]]:
    version_dir = resolve_model_dir(path)
    card = read_json(version_dir / "model_card.json")
    if card.get("kind") != "load-forecast":
        raise ModelDirError(f"{version_dir}: not a load-forecast model (kind {card.get('kind')!r})")
    if card["features"]["schema_hash"] != load_feature_schema_hash():
        raise ModelDirError(f"{version_dir}: feature schema {card['features']['schema_hash'][:12]}… differs from "
                            f"featurelib.load_features ({load_feature_schema_hash()[:12]}…)")
    models: dict[str, bytes] = {}
    for name in card["serving"]["files"]:
        file = version_dir / name
        if not file.is_file():
            raise ModelDirError(f"{file}: missing")
        if sha256_file(file) != card["sha256"][name]:
            raise ModelDirError(f"{file}: sha256 differs from the card")
        models[name] = file.read_bytes()
    return version_dir, card, models


def evaluate_forecast(data: Path, model: Path, after_s: int | None, include_training_vms: bool,
                      progress: Progress) -> dict[str, Any]:
    version_dir, card, models = load_model(model)
    after = int(card["split"]["train_end_s"]) if after_s is None else after_s
    progress(f"model {card['version']}; scoring targets after "
             f"{dt.datetime.fromtimestamp(after, dt.UTC).isoformat()}")
    files = bitbrains.vm_files(data)
    seen = set(card["split"]["train_vm_fingerprints"])
    series = []
    skipped = 0
    for i, vm in enumerate(sorted(files)):
        if not include_training_vms and seen.intersection(file_fingerprints(files[vm])):
            skipped += 1
            continue
        series.append(bitbrains.load_series(vm, files[vm]))
        if (i + 1) % 100 == 0:
            progress(f"read {i + 1}/{len(files)} VMs")
    progress(f"{len(series)} VMs scored, {skipped} left out (the model trained on them)")
    last = HORIZON_STEPS[-1] * STEP_S
    points = build_points(series, lambda now_s, _y: now_s + last > after)

    def forecast(r: int, h: int, q: float, x: np.ndarray) -> np.ndarray:
        return onnx_forecast(models[model_file(r, h, q)], x)

    cases = score(points, after, forecast)
    return {"model_version": card["version"], "model_dir": str(version_dir), "data": str(data),
            "after": dt.datetime.fromtimestamp(after, dt.UTC).isoformat(), "vms_scored": len(series),
            "vms_left_out_as_training": skipped, "cases": cases, "results": bench_rows(cases)}


def write_doc(path: Path, report: dict[str, Any], command: str) -> None:
    from loadtests.bench_format import machine

    doc = {"machine": machine(), "command": command, "results": report["results"],
           "details": {k: v for k, v in report.items() if k != "results"}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n")
