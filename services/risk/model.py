"""The failure model: one XGBoost binary classifier per horizon, exported to ONNX (``horizon_<H>s.onnx``).

Input: ``featurelib.task_features.TASK_FEATURE_NAMES`` (NaN = unknown), optionally followed by
node features when the card declares ``features.node_features = {"schema_hash", "used"}``
(a model trained with the node join). Two backends, chosen per batch from measurements on
this machine (see docs/stream.md): onnxruntime for small batches (a single row is ~18x
faster than XGBoost), native XGBoost ``inplace_predict`` from ``RISK_XGB_MIN_BATCH`` rows
when the version directory also ships ``horizon_<H>s.ubj`` boosters (1.5-2.4x faster on
1k-10k rows). Both compute the same trees; training checks their parity.

The card's optional ``input_ranges`` ({column: [lo, hi]}) become ``ranges`` (``ranges.py``),
the training range each served row is checked against. Its optional
``calibration.horizons["<H>s"] = {x, y}`` (training/calibration.py: an increasing isotonic
map) turns the trees' score into the published probability, ``np.interp(score, x, y)``, on
both backends; a horizon without a table publishes the score.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from featurelib.node.schema import FEATURE_INDEX, node_feature_schema_hash
from featurelib.task_features import TASK_FEATURE_NAMES, task_feature_schema_hash
from services.risk.ranges import InputRanges
from services.runtime.model_watch import ModelRefusedError, onnx_session, read_card, verify_sha256

MODEL_KIND = "failure-risk"


@dataclass(frozen=True)
class FailureModel:
    version: str
    card: dict[str, Any]
    horizons_s: tuple[int, ...]
    sessions: tuple[ort.InferenceSession, ...]
    boosters: tuple[Any, ...] | None
    node_columns: np.ndarray
    """Indices into the node FeatureVector appended after the task features (empty: task features only)."""
    input_name: str
    xgb_min_batch: int = 256
    ranges: InputRanges | None = None
    """Training range per input column (None or no entries: nothing is checked)."""
    calibration: tuple[tuple[np.ndarray, np.ndarray] | None, ...] = ()
    """Per horizon: the (x, y) knots of the score → probability map (None: the score is published)."""

    @property
    def width(self) -> int:
        return len(TASK_FEATURE_NAMES) + len(self.node_columns)

    @property
    def uses_node_features(self) -> bool:
        return len(self.node_columns) > 0

    def backend_for(self, rows: int) -> str:
        return "xgboost" if self.boosters is not None and rows >= self.xgb_min_batch else "onnxruntime"

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray]:
        """Probabilities (n, horizons) for float32 rows of ``width`` columns (NaN = missing)."""
        if x.ndim != 2 or x.shape[1] != self.width:
            raise ValueError(f"expected rows of {self.width} features, got shape {x.shape}")
        x32 = np.ascontiguousarray(x, dtype=np.float32)
        if self.backend_for(len(x32)) == "xgboost" and self.boosters is not None:
            cols = [np.asarray(b.inplace_predict(x32), dtype=np.float64).reshape(-1) for b in self.boosters]
        else:
            cols = [np.asarray(s.run(None, {self.input_name: x32})[1], dtype=np.float64)[:, 1] for s in self.sessions]
        if self.calibration:
            cols = [c if t is None else np.interp(c, t[0], t[1]) for c, t in zip(cols, self.calibration, strict=True)]
        return (np.stack(cols, axis=1),)


def calibration_tables(card: dict[str, Any], horizons: tuple[int, ...]) -> tuple[tuple[np.ndarray, np.ndarray] | None,
                                                                                 ...]:
    """The card's calibration map per horizon; ValueError for a table that is not an increasing map of [0, 1]."""
    tables = (card.get("calibration") or {}).get("horizons") or {}
    out: list[tuple[np.ndarray, np.ndarray] | None] = []
    for h in horizons:
        entry = tables.get(f"{h}s")
        if entry is None:
            out.append(None)
            continue
        x = np.asarray(entry.get("x", []), dtype=np.float64)
        y = np.asarray(entry.get("y", []), dtype=np.float64)
        if (x.ndim != 1 or x.shape != y.shape or len(x) < 2 or not np.all(np.isfinite(x)) or not np.all(np.isfinite(y))
                or np.any(np.diff(x) <= 0) or np.any(np.diff(y) < 0) or x[0] < 0 or x[-1] > 1 or y[0] < 0
                or y[-1] > 1):
            raise ValueError(f"calibration of horizon {h}s is not an increasing map of [0, 1] (x {len(x)}, y {len(y)})")
        out.append((x, y))
    return tuple(out)


def load_failure_model(version_dir: Path, *, xgb_min_batch: int = 256) -> FailureModel:
    card = read_card(version_dir, kind=MODEL_KIND, schema_hash=task_feature_schema_hash())
    verify_sha256(version_dir, card)
    features = card["features"]
    names = features.get("names")
    if names is not None and list(names) != list(TASK_FEATURE_NAMES):
        raise ModelRefusedError(f"{version_dir}: feature names differ from featurelib.task_features")
    node_cols: list[int] = []
    node = features.get("node_features")
    if node:
        if node.get("schema_hash") != node_feature_schema_hash():
            raise ModelRefusedError(
                f"{version_dir}: trained on node feature schema {str(node.get('schema_hash'))[:12]}… but features.v1 "
                f"carries {node_feature_schema_hash()[:12]}…; retrain the failure model")
        unknown = [n for n in node.get("used", []) if n not in FEATURE_INDEX]
        if unknown:
            raise ModelRefusedError(f"{version_dir}: unknown node features {unknown[:5]}")
        node_cols = [FEATURE_INDEX[n] for n in node["used"]]
    columns = [*TASK_FEATURE_NAMES, *(node.get("used", []) if node else [])]
    try:
        ranges = InputRanges.from_card(card.get("input_ranges"), columns)
    except ValueError as exc:
        raise ModelRefusedError(f"{version_dir}: {exc}") from None
    horizons = tuple(int(h) for h in card["label"]["horizons_s"])
    if not horizons:
        raise ModelRefusedError(f"{version_dir}: model card lists no horizons")
    try:
        calibration = calibration_tables(card, horizons)
    except (ValueError, TypeError, AttributeError) as exc:
        raise ModelRefusedError(f"{version_dir}: {exc}") from None
    sessions = []
    for h in horizons:
        path = version_dir / f"horizon_{h}s.onnx"
        if not path.is_file():
            raise ModelRefusedError(f"{path}: missing (the card lists horizon {h}s)")
        sessions.append(onnx_session(path))
    boosters: tuple[Any, ...] | None = None
    ubj = [version_dir / f"horizon_{h}s.ubj" for h in horizons]
    if all(p.is_file() for p in ubj):
        import xgboost as xgb

        loaded = []
        for p in ubj:
            booster = xgb.Booster()
            booster.load_model(str(p))
            booster.set_param({"nthread": 1})
            loaded.append(booster)
        boosters = tuple(loaded)
    model = FailureModel(
        version=str(card["version"]),
        card=card,
        horizons_s=horizons,
        sessions=tuple(sessions),
        boosters=boosters,
        node_columns=np.array(node_cols, dtype=np.int64),
        input_name=card.get("onnx", {}).get("input_name", "input"),
        xgb_min_batch=xgb_min_batch,
        ranges=ranges,
        calibration=calibration if any(t is not None for t in calibration) else (),
    )
    try:
        model(np.full((1, model.width), np.nan, dtype=np.float32))
    except Exception as exc:
        raise ModelRefusedError(f"{version_dir}: test inference failed ({exc})") from None
    return model
