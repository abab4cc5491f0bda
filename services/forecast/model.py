"""The load-forecast model: 12 ONNX boosters (cpu/mem × 5/15/30 min × p50/p90) run as one batch call.

Each file takes ``input`` float32[N, 36] (``featurelib.load_features`` order, NaN as is) and returns the
forecast in percent. The model card's feature-schema hash must equal ``load_feature_schema_hash()`` and
every file its listed sha256, else the version is refused (at start-up: exit 2; on reload: the old one
keeps serving).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import onnxruntime as ort

from featurelib.load_features import N_LOAD_FEATURES, load_feature_schema_hash
from services.runtime.model_watch import ModelRefusedError, checked_file, onnx_session, read_card

KIND: Final = "load-forecast"
RESOURCES: Final = {"cpu": "cpu", "mem": "memory"}
"""Card resource name → forecasts.v1 resource name."""


@dataclass(frozen=True)
class Head:
    resource: str  # forecasts.v1 name: cpu | memory
    horizon_s: int
    quantile: float
    session: ort.InferenceSession
    input_name: str
    output_name: str


@dataclass(frozen=True)
class ForecastModel:
    version: str
    card: dict[str, Any]
    heads: tuple[Head, ...]
    """Ordered by horizon, then resource (cpu, memory), then quantile (p50, p90)."""

    @property
    def horizons_s(self) -> tuple[int, ...]:
        return tuple(sorted({h.horizon_s for h in self.heads}))

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, ...]:
        """One (n,) array of percentages per head, for float32 rows of N_LOAD_FEATURES (NaN = missing)."""
        if x.ndim != 2 or x.shape[1] != N_LOAD_FEATURES:
            raise ValueError(f"expected rows of {N_LOAD_FEATURES} load features, got shape {x.shape}")
        x = np.ascontiguousarray(x, dtype=np.float32)
        return tuple(np.asarray(h.session.run([h.output_name], {h.input_name: x})[0], dtype=np.float64).reshape(-1)
                     for h in self.heads)


def load_forecast_model(version_dir: Path) -> ForecastModel:
    card = read_card(version_dir, kind="forecast", schema_hash=load_feature_schema_hash())
    if card.get("kind") != KIND:
        raise ModelRefusedError(f"{version_dir}: a {card.get('kind')!r} model, not a {KIND!r} model")
    files: dict[str, Any] = (card.get("serving") or {}).get("files") or {}
    digests: dict[str, str] = card.get("sha256") or {}
    if not files:
        raise ModelRefusedError(f"{version_dir}: the model card lists no serving files")
    heads: list[Head] = []
    for name, spec in files.items():
        path = checked_file(version_dir, name, digests.get(name))
        resource = RESOURCES.get(str(spec.get("resource")))
        if resource is None:
            raise ModelRefusedError(f"{path}: unknown resource {spec.get('resource')!r}")
        session = onnx_session(path)
        heads.append(Head(resource, int(spec["horizon_s"]), float(spec["quantile"]), session,
                          session.get_inputs()[0].name, session.get_outputs()[0].name))
    heads.sort(key=lambda h: (h.horizon_s, h.resource != "cpu", h.quantile))
    model = ForecastModel(version=str(card["version"]), card=card, heads=tuple(heads))
    pairs = {(h.resource, h.horizon_s): sorted(x.quantile for x in heads
                                               if (x.resource, x.horizon_s) == (h.resource, h.horizon_s))
             for h in heads}
    if any(q != [0.5, 0.9] for q in pairs.values()) or len(pairs) != 2 * len(model.horizons_s):
        raise ModelRefusedError(f"{version_dir}: needs a p50 and a p90 per resource and horizon, got {sorted(pairs)}")
    try:
        model(np.full((1, N_LOAD_FEATURES), np.nan, dtype=np.float32))
    except Exception as exc:
        raise ModelRefusedError(f"{version_dir}: test inference failed ({exc})") from None
    return model
