"""XGBoost -> ONNX with a parity check; ONNX inference for evaluation."""

from __future__ import annotations

from pathlib import Path
from typing import Final, NamedTuple

import numpy as np
import onnx
import onnxmltools
import onnxruntime as ort
import xgboost as xgb
from onnxmltools.convert.common.data_types import FloatTensorType

PARITY_TOLERANCE: Final = 1e-5
INPUT_NAME: Final = "input"
TARGET_OPSET: Final = 15


class ParityError(RuntimeError):
    """The ONNX model does not reproduce XGBoost's probabilities."""


def to_onnx(booster: xgb.Booster, n_features: int, metadata: dict[str, str]) -> onnx.ModelProto:
    """Convert a binary:logistic booster (features must be unnamed, i.e. ``f0..fN``)."""
    if booster.feature_names is not None:
        raise ValueError("booster must have no feature names (the converter needs f0..fN)")
    model: onnx.ModelProto = onnxmltools.convert_xgboost(
        booster, initial_types=[(INPUT_NAME, FloatTensorType([None, n_features]))], target_opset=TARGET_OPSET)
    onnx.helper.set_model_props(model, metadata)
    return model


def session(model: bytes | Path) -> ort.InferenceSession:
    data = model.read_bytes() if isinstance(model, Path) else model
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.log_severity_level = 3
    return ort.InferenceSession(data, sess_options=options, providers=["CPUExecutionProvider"])


def onnx_probability(sess: ort.InferenceSession, x: np.ndarray, batch: int = 200_000) -> np.ndarray:
    """P(failure) for float32 rows (NaN = missing), batched."""
    out = []
    for i in range(0, len(x), batch):
        _, probabilities = sess.run(None, {INPUT_NAME: np.ascontiguousarray(x[i:i + batch], dtype=np.float32)})
        out.append(np.asarray(probabilities)[:, 1])
    return np.concatenate(out).astype(np.float64) if out else np.zeros(0)


class Parity(NamedTuple):
    max_abs_diff: float
    onnx_probability: np.ndarray
    """ONNX P(failure) for the checked rows (reused for evaluation)."""


def export_with_parity(booster: xgb.Booster, x_check: np.ndarray, path: Path, metadata: dict[str, str],
                       tolerance: float = PARITY_TOLERANCE) -> Parity:
    """Write ``path`` only if ONNX matches XGBoost within ``tolerance`` on ``x_check``."""
    model = to_onnx(booster, x_check.shape[1], metadata)
    data = model.SerializeToString()
    x32 = np.asarray(x_check, dtype=np.float32)
    expected = np.asarray(booster.predict(xgb.DMatrix(x32)), dtype=np.float64)
    got = onnx_probability(session(data), x32)
    diff = float(np.max(np.abs(expected - got))) if len(x32) else 0.0
    if not diff <= tolerance:
        raise ParityError(f"ONNX parity check failed for {path.name}: max |p_onnx - p_xgb| = {diff:.3g} "
                          f"> {tolerance:g} on {len(x32):,} rows")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".onnx.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return Parity(diff, got)


def save_booster(booster: xgb.Booster, path: Path, x_check: np.ndarray, tolerance: float = PARITY_TOLERANCE) -> Path:
    """Save the booster (UBJSON) for native inference; reload it and check it still predicts the same."""
    tmp = path.with_name(path.name + ".tmp.ubj")
    booster.save_model(str(tmp))
    reloaded = xgb.Booster()
    reloaded.load_model(str(tmp))
    x32 = np.asarray(x_check, dtype=np.float32)
    if len(x32):
        diff = float(np.max(np.abs(reloaded.inplace_predict(x32) - booster.inplace_predict(x32))))
        if not diff <= tolerance:
            tmp.unlink()
            raise ParityError(f"{path.name}: reloaded booster differs by {diff:.3g}")
    tmp.replace(path)
    return path
