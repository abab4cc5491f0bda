"""The pod-relative regime model: classifier over ``featurelib.pod_regime`` rows (ONNX), with its abstention rules.

Loaded and judged by the same code offline (``borgctl eval regime --basis pods``) and by a stage serving it, so
the coverage measured is the coverage that would be served. Rules (card ``abstention``): fewer than
``min_pods_read`` pods read, or one of the node's ``required_features`` invalid (the shipped card requires none: a
node's pods carry the evidence) → ``counters_missing``; top probability below the floor of the regime it names
(card ``low_confidence.floors``; an older card's single ``floor`` applies to every regime) → ``low_confidence``.
The rows are read over the span the model was trained with (card ``features.pod_span_windows``, 1 when absent:
each pod over its last windows, ``featurelib.pod_regime``); whoever builds the rows takes it from
``PodRegimeModel.span_windows``.
It has no out-of-distribution rule: reading pods against their own jobs is what carries it to kinds it never saw
(docs/models.md), so distance from the training kinds is not a reason to abstain.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import onnxruntime as ort
import orjson

from contracts.models import REGIMES
from featurelib.node.schema import FEATURE_INDEX
from featurelib.pod_regime import (
    COLUMNS,
    N_COLUMNS,
    SPAN_WINDOWS_MAX,
    VICTIM_COLUMNS,
    JobOf,
    PodRegimeWindows,
    pod_regime_schema_hash,
)
from services.regime import abstention
from services.runtime.model_watch import CARD_FILE, ModelRefusedError, onnx_session, read_card, verify_sha256

MODEL_KIND: Final = "regime_pods"
PODS_COLUMN: Final = COLUMNS.index("pods")
_NODE_OFFSET: Final = len(VICTIM_COLUMNS)


@dataclass(frozen=True)
class PodRegimeModel:
    version: str
    card: dict[str, Any]
    classifier: ort.InferenceSession
    regimes: tuple[str, ...]
    input_name: str
    required: tuple[int, ...]
    """Columns of the row (the node's own features) without which the model abstains."""
    min_pods_read: int
    confidence_floors: tuple[float, ...]
    """One floor per regime (``regimes`` order): a row abstains below the floor of its top regime."""
    span_windows: int = 1
    """Windows each pod is read over (``featurelib.pod_regime``): the rows must be built with it."""

    def windows(self, job_of: JobOf, **kw: Any) -> PodRegimeWindows:
        """The row builder this model was trained on (its span); ``kw`` as ``PodRegimeWindows`` takes them."""
        return PodRegimeWindows(job_of, span_windows=self.span_windows, **kw)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Probabilities (n, regimes) for float32 rows of ``N_COLUMNS`` (NaN = not measurable)."""
        if x.ndim != 2 or x.shape[1] != N_COLUMNS:
            raise ValueError(f"expected rows of {N_COLUMNS} columns, got shape {x.shape}")
        out = self.classifier.run(None, {self.input_name: np.ascontiguousarray(x, dtype=np.float32)})[1]
        return np.asarray(out, dtype=np.float64)

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, None]:
        """(``predict``, None): the shape ``borgctl eval regime`` calls the node model with."""
        return self.predict(x), None

    def judge(self, x: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(abstention bitmask uint8, ``abstention`` bits; NaN OOD score: this model has none) per row."""
        pods_read = np.nan_to_num(x[:, PODS_COLUMN])
        missing = abstention.counters_missing(x, self.required) | (pods_read < self.min_pods_read)
        mask = np.where(missing, abstention.COUNTERS_MISSING, 0).astype(np.uint8)
        if probs.shape[0] and max(self.confidence_floors) > 0.0:
            below = abstention.below_top_class_floor(probs, self.confidence_floors)
            mask |= np.where(below, abstention.LOW_CONFIDENCE, 0).astype(np.uint8)
        return mask, np.full(x.shape[0], np.nan)


def span_of(version_dir: Path) -> int:
    """The card's ``features.pod_span_windows`` (1 when absent or the card is unreadable: ``read_card`` then says
    why); a value this code cannot build rows for is refused."""
    try:
        card = orjson.loads((version_dir / CARD_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return 1
    span = ((card.get("features") if isinstance(card, dict) else None) or {}).get("pod_span_windows", 1)
    if not isinstance(span, int) or isinstance(span, bool) or not 1 <= span <= SPAN_WINDOWS_MAX:
        raise ModelRefusedError(f"{version_dir}: features.pod_span_windows must be an integer 1..{SPAN_WINDOWS_MAX}, "
                                f"got {span!r}")
    return span


def load_pod_regime_model(version_dir: Path) -> PodRegimeModel:
    span = span_of(version_dir)
    card = read_card(version_dir, kind=MODEL_KIND, schema_hash=pod_regime_schema_hash(span))
    verify_sha256(version_dir, card)
    if list(card["features"].get("columns", [])) != list(COLUMNS):
        raise ModelRefusedError(f"{version_dir}: the card's input columns differ from featurelib.pod_regime's")
    regimes = tuple(card["outputs"]["regimes"])
    if regimes != REGIMES:
        raise ModelRefusedError(f"{version_dir}: regimes {regimes} differ from {REGIMES}")
    rules = card.get("abstention") or {}
    required = list(rules.get("required_features", abstention.DEFAULT_REQUIRED_FEATURES))
    unknown = [n for n in required if n not in FEATURE_INDEX]
    low = rules.get("low_confidence") or {}
    by_regime = low.get("floors")
    if isinstance(by_regime, dict):
        floors = tuple(float(by_regime.get(r, float("nan"))) for r in regimes)
    else:
        floors = (float(low.get("floor", 0.0)),) * len(regimes)
    min_pods = int(rules.get("min_pods_read", 1))
    if unknown or not all(0.0 <= f <= 1.0 for f in floors) or min_pods < 1:
        raise ModelRefusedError(f"{version_dir}: bad abstention rules (unknown features {unknown[:5]}, "
                                f"floors {dict(zip(regimes, floors, strict=True))}, min_pods_read {min_pods})")
    model = PodRegimeModel(
        version=str(card["version"]), card=card,
        classifier=onnx_session(version_dir / card["onnx"]["files"]["classifier"]), regimes=regimes,
        input_name=card["onnx"].get("input_name", "input"),
        required=tuple(_NODE_OFFSET + FEATURE_INDEX[n] for n in required), min_pods_read=min_pods,
        confidence_floors=floors, span_windows=span)
    try:  # a model that cannot score an all-missing row is refused now, not mid-stream
        model(np.full((1, N_COLUMNS), np.nan, dtype=np.float32))
    except Exception as exc:
        raise ModelRefusedError(f"{version_dir}: test inference failed ({exc})") from None
    return model
