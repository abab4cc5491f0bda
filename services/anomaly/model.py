"""The isolation-forest anomaly model (ONNX, batched); score = the forest's anomaly score in (0, 1]."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from featurelib.node_features import FEATURE_INDEX, N_FEATURES, node_feature_schema_hash
from services.runtime.model_watch import ModelRefusedError, onnx_session, read_card, verify_sha256


@dataclass(frozen=True)
class AnomalyModel:
    version: str
    card: dict[str, Any]
    columns: np.ndarray
    session: ort.InferenceSession
    offset: float
    threshold: float
    input_name: str

    def __call__(self, x_full: np.ndarray) -> tuple[np.ndarray]:
        """Anomaly scores (n,) for float32 rows of N_FEATURES (NaN = invalid, imputed in the graph)."""
        if x_full.ndim != 2 or x_full.shape[1] != N_FEATURES:
            raise ValueError(f"expected rows of {N_FEATURES} features, got shape {x_full.shape}")
        x = np.ascontiguousarray(x_full[:, self.columns], dtype=np.float32)
        _, scores = self.session.run(None, {self.input_name: x})
        return (np.clip(-(np.asarray(scores, dtype=np.float64).reshape(-1) + self.offset), 0.0, 1.0),)


def load_anomaly_model(version_dir: Path) -> AnomalyModel:
    card = read_card(version_dir, kind="anomaly", schema_hash=node_feature_schema_hash())
    verify_sha256(version_dir, card)
    used = card["features"].get("used") or []
    unknown = [n for n in used if n not in FEATURE_INDEX]
    if unknown or not used:
        raise ModelRefusedError(f"{version_dir}: model card lists unknown input features {unknown[:5]}")
    outputs = card["outputs"]
    model = AnomalyModel(
        version=str(card["version"]),
        card=card,
        columns=np.array([FEATURE_INDEX[n] for n in used], dtype=np.int64),
        session=onnx_session(version_dir / card["onnx"]["files"]["forest"]),
        offset=float(outputs["offset"]),
        threshold=float(outputs["threshold"]),
        input_name=card["onnx"].get("input_name", "input"),
    )
    try:
        model(np.full((1, N_FEATURES), np.nan, dtype=np.float32))
    except Exception as exc:
        raise ModelRefusedError(f"{version_dir}: test inference failed ({exc})") from None
    return model
