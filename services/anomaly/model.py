"""The isolation-forest anomaly model (ONNX, batched); score = the forest's anomaly score in (0, 1]."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from featurelib.node.schema import FEATURE_INDEX, N_FEATURES, node_feature_schema_hash
from services.anomaly.compact_forest import compact_session
from services.runtime.model_watch import ModelRefusedError, onnx_session, read_card, verify_sha256

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AnomalyModel:
    version: str
    card: dict[str, Any]
    columns: np.ndarray
    session: ort.InferenceSession
    offset: float
    threshold: float
    input_name: str
    output_name: str = "scores"
    compact: bool = False  # True: the compact single-ensemble graph built at load (see compact_forest)

    def __call__(self, x_full: np.ndarray) -> tuple[np.ndarray]:
        """Anomaly scores (n,) for float32 rows of N_FEATURES (NaN = invalid, imputed in the graph)."""
        if x_full.ndim != 2 or x_full.shape[1] != N_FEATURES:
            raise ValueError(f"expected rows of {N_FEATURES} features, got shape {x_full.shape}")
        x = np.ascontiguousarray(x_full[:, self.columns], dtype=np.float32)
        (scores,) = self.session.run([self.output_name], {self.input_name: x})
        return (np.clip(-(np.asarray(scores, dtype=np.float64).reshape(-1) + self.offset), 0.0, 1.0),)


def load_anomaly_model(version_dir: Path) -> AnomalyModel:
    card = read_card(version_dir, kind="anomaly", schema_hash=node_feature_schema_hash())
    verify_sha256(version_dir, card)
    used = card["features"].get("used") or []
    unknown = [n for n in used if n not in FEATURE_INDEX]
    if unknown or not used:
        raise ModelRefusedError(f"{version_dir}: model card lists unknown input features {unknown[:5]}")
    outputs = card["outputs"]
    path = version_dir / card["onnx"]["files"]["forest"]
    input_name = card["onnx"].get("input_name", "input")
    session = onnx_session(path)
    graph_outputs = session.get_outputs()
    if len(graph_outputs) < 2:
        raise ModelRefusedError(f"{path}: expected the outputs (label, scores), got {[o.name for o in graph_outputs]}")
    output_name = graph_outputs[1].name
    # the original graph is kept only for the parity check, unless the compact one is refused
    compact = compact_session(path.read_bytes(), session, input_name=input_name, output_name=output_name)
    if compact.session is not None:
        log.info("anomaly model %s: compact forest graph (%s)", card.get("version"), compact.reason)
        session = compact.session
    else:
        log.warning("anomaly model %s: keeping the original %d-node graph: %s", card.get("version"),
                    compact.original_nodes, compact.reason)
    model = AnomalyModel(
        version=str(card["version"]),
        card=card,
        columns=np.array([FEATURE_INDEX[n] for n in used], dtype=np.int64),
        session=session,
        offset=float(outputs["offset"]),
        threshold=float(outputs["threshold"]),
        input_name=input_name,
        output_name=output_name,
        compact=compact.session is not None,
    )
    try:
        model(np.full((1, N_FEATURES), np.nan, dtype=np.float32))
    except Exception as exc:
        raise ModelRefusedError(f"{version_dir}: test inference failed ({exc})") from None
    return model
