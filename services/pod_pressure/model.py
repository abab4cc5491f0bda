"""The pod-pressure model: one ONNX regressor per resource (llc, membw, core, frontend).

Each file takes float32[N, features] (``featurelib.pod.EXTENDED_FEATURES`` order) and returns the pressure.
The model card's feature-schema hash must equal ``pod_feature_schema_hash()`` and every file its listed sha256,
else the version is refused (at start-up: exit 2; on reload: the old one keeps serving). The card's
``input_ranges`` (the training features' span) say where the model may answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import onnxruntime as ort

from featurelib.pod import EXTENDED_EVENTS, EXTENDED_FEATURES, pod_feature_schema_hash
from services.runtime.model_watch import ModelRefusedError, checked_file, onnx_session, read_card

KIND: Final = "pod-pressure"
RESOURCES: Final = ("llc", "membw", "core", "frontend")


@dataclass(frozen=True)
class PodPressureModel:
    version: str
    card: dict[str, Any]
    sessions: tuple[ort.InferenceSession, ...]
    """One per resource, in ``RESOURCES`` order."""
    low: np.ndarray
    high: np.ndarray
    events: tuple[str, ...]

    def in_range(self, x: np.ndarray) -> np.ndarray:
        """Per row: every feature inside the training range."""
        ok: np.ndarray = np.all((x >= self.low) & (x <= self.high), axis=1)
        return ok

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, ...]:
        """One (n,) array of pressures (clipped to 0..1) per resource, for rows of the model's features."""
        if x.ndim != 2 or x.shape[1] != len(self.low):
            raise ValueError(f"expected rows of {len(self.low)} pod features, got shape {x.shape}")
        x32 = np.ascontiguousarray(x, dtype=np.float32)
        return tuple(np.clip(np.asarray(s.run(None, {s.get_inputs()[0].name: x32})[0], dtype=np.float64)
                             .reshape(-1), 0.0, 1.0) for s in self.sessions)


def load_pod_pressure_model(version_dir: Path) -> PodPressureModel:
    card = read_card(version_dir, kind=KIND, schema_hash=pod_feature_schema_hash(True))
    features = card.get("features") or {}
    if list(features.get("names") or []) != list(EXTENDED_FEATURES) \
            or list(features.get("events") or []) != list(EXTENDED_EVENTS):
        raise ModelRefusedError(f"{version_dir}: the card's feature names or events differ from featurelib.pod's")
    ranges = np.asarray(features.get("input_ranges") or [], dtype=np.float64)
    if ranges.shape != (len(EXTENDED_FEATURES), 2) or not np.all(ranges[:, 0] <= ranges[:, 1]):
        raise ModelRefusedError(f"{version_dir}: features.input_ranges must be {len(EXTENDED_FEATURES)} "
                                f"[low, high] pairs, got shape {ranges.shape}")
    files: dict[str, Any] = (card.get("serving") or {}).get("files") or {}
    digests: dict[str, str] = card.get("sha256") or {}
    by_resource: dict[str, ort.InferenceSession] = {}
    for name, spec in files.items():
        path = checked_file(version_dir, name, digests.get(name))
        by_resource[str(spec.get("resource"))] = onnx_session(path)
    if sorted(by_resource) != sorted(RESOURCES):
        raise ModelRefusedError(f"{version_dir}: needs one file per resource {RESOURCES}, got {sorted(by_resource)}")
    model = PodPressureModel(version=str(card["version"]), card=card,
                             sessions=tuple(by_resource[r] for r in RESOURCES),
                             low=ranges[:, 0], high=ranges[:, 1], events=tuple(EXTENDED_EVENTS))
    try:
        model(np.zeros((1, len(EXTENDED_FEATURES)), dtype=np.float32))
    except Exception as exc:
        raise ModelRefusedError(f"{version_dir}: test inference failed ({exc})") from None
    return model
