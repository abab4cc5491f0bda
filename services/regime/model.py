"""The regime model: classifier + one interference regressor per workload class (ONNX, batched)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from contracts.models import REGIMES, WORKLOAD_CLASSES
from featurelib.node.schema import FEATURE_INDEX, N_FEATURES, node_feature_schema_hash
from services.regime import abstention
from services.runtime.model_watch import ModelRefusedError, onnx_session, read_card, verify_sha256

MAX_SLOWDOWN = 100.0
DEFAULT_RULES = abstention.Rules(required=tuple(FEATURE_INDEX[n] for n in abstention.DEFAULT_REQUIRED_FEATURES))


@dataclass(frozen=True)
class RegimeModel:
    version: str
    card: dict[str, Any]
    columns: np.ndarray
    classifier: ort.InferenceSession
    interference: tuple[ort.InferenceSession, ...]
    regimes: tuple[str, ...]
    input_name: str
    rules: abstention.Rules = DEFAULT_RULES
    """The card's abstention rules (older cards: the counters rule with the default required features)."""

    @property
    def required(self) -> tuple[int, ...]:
        """Columns (of the full feature row) without which the model abstains (``counters_missing``)."""
        return self.rules.required

    def __call__(self, x_full: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(probabilities (n, regimes), slowdown (n, classes)) for float32 rows of N_FEATURES (NaN = invalid).

        The interference regressors run only on the rows the model answers (``judge`` gives no reason to
        abstain): an abstained window publishes no interference, and the live stage abstains on most
        windows, so this saves most of the regressors' cost. Abstained rows get slowdown 1.0, never read.
        """
        if x_full.ndim != 2 or x_full.shape[1] != N_FEATURES:
            raise ValueError(f"expected rows of {N_FEATURES} features, got shape {x_full.shape}")
        x = np.ascontiguousarray(x_full[:, self.columns], dtype=np.float32)
        probs = np.asarray(self.classifier.run(None, {self.input_name: x})[1], dtype=np.float64)
        slowdown = np.ones((x.shape[0], len(self.interference)))
        answered = np.flatnonzero(self.judge(x_full, probs)[0] == 0)
        if answered.size:
            xa = x if answered.size == x.shape[0] else np.ascontiguousarray(x[answered])
            logs = np.concatenate(
                [np.asarray(s.run(None, {self.input_name: xa})[0], dtype=np.float64).reshape(-1, 1)
                 for s in self.interference], axis=1)
            # the regressors were trained on the worst co-runner's slowdown (max, never a sum)
            slowdown[answered] = np.clip(np.exp(logs), 1.0, MAX_SLOWDOWN)
        return probs, slowdown

    def judge(self, x_full: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row: (abstention bitmask, uint8, ``abstention`` bits; out-of-distribution score, float64,
        1.0 = the abstention threshold, NaN when not computed). 0 in the mask: the model answers.

        Rules (card ``abstention``): required counters invalid → counters_missing; OOD score > 1 →
        out_of_distribution; top probability below the confidence floor → low_confidence."""
        return abstention.judge(x_full, probs, self.rules)


def load_regime_model(version_dir: Path) -> RegimeModel:
    card = read_card(version_dir, kind="regime", schema_hash=node_feature_schema_hash())
    verify_sha256(version_dir, card)
    features = card["features"]
    unknown = [n for n in features.get("used", []) if n not in FEATURE_INDEX]
    if unknown or not features.get("used"):
        raise ModelRefusedError(f"{version_dir}: model card lists unknown input features {unknown[:5]}")
    regimes = tuple(card["outputs"]["regimes"])
    if not set(regimes) <= set(REGIMES):
        raise ModelRefusedError(f"{version_dir}: unknown regimes {regimes}")
    try:
        rules = abstention.rules_from_card(card.get("abstention"), FEATURE_INDEX)
    except ValueError as exc:
        raise ModelRefusedError(f"{version_dir}: {exc}") from None
    files = card["onnx"]["files"]
    inter = files["interference"]
    missing = [c for c in WORKLOAD_CLASSES if c not in inter]
    if missing:
        raise ModelRefusedError(f"{version_dir}: no interference model for {missing}")
    model = RegimeModel(
        version=str(card["version"]),
        card=card,
        columns=np.array([FEATURE_INDEX[n] for n in features["used"]], dtype=np.int64),
        classifier=onnx_session(version_dir / files["classifier"]),
        interference=tuple(onnx_session(version_dir / inter[c]) for c in WORKLOAD_CLASSES),
        regimes=regimes,
        input_name=card["onnx"].get("input_name", "input"),
        rules=rules,
    )
    # smoke inference: a model that cannot score an all-missing row is refused now, not mid-stream
    try:
        row = np.full((1, N_FEATURES), np.nan, dtype=np.float32)
        model(row)
        # the regressors too (the call above skips them for a row the model abstains on)
        for session in model.interference:
            session.run(None, {model.input_name: np.ascontiguousarray(row[:, model.columns])})
    except Exception as exc:
        raise ModelRefusedError(f"{version_dir}: test inference failed ({exc})") from None
    return model
