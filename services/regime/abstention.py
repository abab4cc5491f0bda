"""When the regime model abstains: reason bits, the counters rule, and their wire names.

Pure (numpy only): the regime stage and ``borgctl eval regime`` judge windows with the same
code, so the coverage measured offline is the coverage served. The model-specific rules
(out-of-distribution score, confidence floor) are parameters shipped in the model card
(``abstention``); ``RegimeModel.judge`` applies them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

COUNTERS_MISSING = 1
OUT_OF_DISTRIBUTION = 2
LOW_CONFIDENCE = 4
REASON_BITS: tuple[tuple[int, str], ...] = (
    (COUNTERS_MISSING, "counters_missing"),
    (OUT_OF_DISTRIBUTION, "out_of_distribution"),
    (LOW_CONFIDENCE, "low_confidence"),
)
"""Bit → the ``AbstainReason`` it stands for (contracts.models), in the order reasons are listed."""

DEFAULT_REQUIRED_FEATURES: tuple[str, ...] = ("ipc_mean_10s", "cache_mpki_mean_10s", "llc_mpki_mean_10s")
"""Without instructions per cycle and a cache-miss rate no contention regime can be told apart; a node whose
agent publishes software events only (no hardware PMU) has none of them. Used when a card names none."""

_NAMES = {bit: [name for b, name in REASON_BITS if bit & b] for bit in range(1 << len(REASON_BITS))}


def reasons_of(mask: int) -> list[str]:
    """The wire names of the reasons set in ``mask`` (empty for 0: the model answered)."""
    return list(_NAMES[mask & ((1 << len(REASON_BITS)) - 1)])


def counters_missing(x_full: np.ndarray, required: Sequence[int]) -> np.ndarray:
    """Rows (float32, NaN = invalid) where any feature in ``required`` (column indices) is invalid."""
    if not len(required):
        return np.zeros(x_full.shape[0], dtype=bool)
    return np.asarray(np.isnan(x_full[:, list(required)]).any(axis=1))


@dataclass(frozen=True)
class Rules:
    """The abstention rules of one model version (the card's ``abstention`` section, resolved to columns).

    ``ood_*``: robust per-feature standardisation ``z = (x - center) / scale`` on ``ood_columns`` and
    the score ``mean(min(|z|, OOD_Z_CAP))`` over the row's valid columns, divided by ``ood_threshold``
    (so 1.0 = the threshold; above it the window is out of distribution). No ``ood_columns``: no
    score (NaN). ``confidence_floor``: the model abstains when its top probability is below it.
    """

    required: tuple[int, ...]
    ood_columns: tuple[int, ...] = ()
    ood_center: tuple[float, ...] = ()
    ood_scale: tuple[float, ...] = ()
    ood_threshold: float = 1.0
    confidence_floor: float = 0.0


OOD_Z_CAP: Final = 20.0
"""|z| is capped so one wild counter cannot dominate the mean (a glitch is the anomaly model's job)."""


def ood_score(x_full: np.ndarray, rules: Rules) -> np.ndarray:
    """Out-of-distribution score per row (1.0 = threshold); NaN when the rules have none or no column is valid."""
    n = x_full.shape[0]
    if not rules.ood_columns:
        return np.full(n, np.nan)
    x = x_full[:, list(rules.ood_columns)].astype(np.float64)
    z = np.abs(x - np.asarray(rules.ood_center)) / np.asarray(rules.ood_scale)
    np.minimum(z, OOD_Z_CAP, out=z)
    valid = ~np.isnan(z)
    count = valid.sum(axis=1)
    total = np.where(valid, z, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out: np.ndarray = np.where(count > 0, total / np.maximum(count, 1) / rules.ood_threshold, np.nan)
    return out


def below_top_class_floor(probs: np.ndarray, floors: Sequence[float]) -> np.ndarray:
    """Rows whose top probability is below the floor of the class it names (one floor per class)."""
    below: np.ndarray = probs.max(axis=1) < np.asarray(floors, dtype=np.float64)[probs.argmax(axis=1)]
    return below


def judge(x_full: np.ndarray, probs: np.ndarray, rules: Rules) -> tuple[np.ndarray, np.ndarray]:
    """(reason bitmask uint8, OOD score float64) per row; see ``Rules``. 0 = the model answers."""
    mask = np.where(counters_missing(x_full, rules.required), COUNTERS_MISSING, 0).astype(np.uint8)
    score = ood_score(x_full, rules)
    mask |= np.where(score > 1.0, OUT_OF_DISTRIBUTION, 0).astype(np.uint8)
    if rules.confidence_floor > 0.0 and probs.shape[0]:
        mask |= np.where(probs.max(axis=1) < rules.confidence_floor, LOW_CONFIDENCE, 0).astype(np.uint8)
    return mask, score


def rules_from_card(section: Mapping[str, Any] | None, index: Mapping[str, int]) -> Rules:
    """Resolve a card's ``abstention`` section (feature names → columns of the full row).

    Older cards have none: the counters rule with ``DEFAULT_REQUIRED_FEATURES`` only. Raises
    ``ValueError`` on names the feature schema lacks or inconsistent lengths.
    """
    if not section:
        return Rules(required=tuple(index[n] for n in DEFAULT_REQUIRED_FEATURES))
    required_names = list(section.get("required_features", DEFAULT_REQUIRED_FEATURES))
    ood = section.get("out_of_distribution") or {}
    ood_names = list(ood.get("features", []))
    unknown = [n for n in [*required_names, *ood_names] if n not in index]
    if unknown:
        raise ValueError(f"abstention rules name unknown features {unknown[:5]}")
    center = tuple(float(v) for v in ood.get("center", []))
    scale = tuple(float(v) for v in ood.get("scale", []))
    if not (len(center) == len(scale) == len(ood_names)) or any(not s > 0 for s in scale):
        raise ValueError("abstention.out_of_distribution: features, center and scale must align, scale > 0")
    threshold = float(ood.get("threshold", 1.0))
    floor = float((section.get("low_confidence") or {}).get("floor", 0.0))
    if not threshold > 0 or not 0.0 <= floor <= 1.0:
        raise ValueError(f"abstention thresholds out of range (ood {threshold}, confidence floor {floor})")
    return Rules(required=tuple(index[n] for n in required_names), ood_columns=tuple(index[n] for n in ood_names),
                 ood_center=center, ood_scale=scale, ood_threshold=threshold, confidence_floor=floor)
