"""Calibration of the failure model's score: an isotonic map shipped as a small table.

The table is a strictly increasing piecewise-linear map ``np.interp(p, x, y)`` from the raw
score (the ONNX output) to the published probability: the knots are the centres of the
isotonic-regression blocks (score mean, block positive rate), with (0, 0) and (1, 1) as
end points. Strictly increasing, so ranking metrics (AUCPR, ROC-AUC) are unchanged except
for exact ties; serving applies it with ``np.interp`` (services/risk/model.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from sklearn.isotonic import IsotonicRegression

MAX_KNOTS: Final = 64
_EPS: Final = 1e-9
"""Added per knot so the map is strictly increasing even where isotonic blocks are equal."""


@dataclass(frozen=True, slots=True)
class Calibration:
    x: tuple[float, ...]
    y: tuple[float, ...]
    method: str = "isotonic"
    fitted_rows: int = 0
    fitted_positives: int = 0

    def apply(self, p: np.ndarray) -> np.ndarray:
        return np.interp(np.asarray(p, dtype=np.float64), self.x, self.y)

    def to_card(self) -> dict[str, Any]:
        return {"method": self.method, "x": list(self.x), "y": list(self.y), "fitted_rows": self.fitted_rows,
                "fitted_positives": self.fitted_positives}

    @staticmethod
    def from_card(entry: dict[str, Any]) -> Calibration:
        return Calibration(tuple(float(v) for v in entry["x"]), tuple(float(v) for v in entry["y"]),
                           str(entry.get("method", "isotonic")), int(entry.get("fitted_rows", 0)),
                           int(entry.get("fitted_positives", 0)))


def fit_isotonic(score: np.ndarray, y: np.ndarray, max_knots: int = MAX_KNOTS) -> Calibration | None:
    """Isotonic fit of ``y`` on ``score``; None when ``y`` has one class only (nothing to fit)."""
    score = np.asarray(score, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(y) == 0 or y.min() == y.max():
        return None
    fitted = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit_transform(score, y)
    values, block = np.unique(fitted, return_inverse=True)
    centres = np.bincount(block, weights=score) / np.bincount(block)
    x, v = _thin(centres, values, max_knots)
    x = np.concatenate([[0.0], x, [1.0]])
    v = np.concatenate([[0.0], v, [1.0]])
    x, v = _strictly_increasing(x, v)
    return Calibration(tuple(float(a) for a in x), tuple(float(b) for b in v), "isotonic", len(y), int(y.sum()))


def _thin(x: np.ndarray, v: np.ndarray, max_knots: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_knots`` knots, evenly spaced in block order (first and last kept)."""
    order = np.argsort(x, kind="stable")
    x, v = x[order], v[order]
    if len(x) <= max_knots:
        return x, v
    idx = np.unique(np.linspace(0, len(x) - 1, max_knots).round().astype(int))
    return x[idx], v[idx]


def _strictly_increasing(x: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    keep = np.concatenate([[True], np.diff(x) > 0])  # np.interp needs increasing x
    x, v = x[keep], v[keep]
    n = len(v)
    # shrink a hair, then add a rising epsilon: strictly increasing and still inside [0, 1]
    v = np.maximum.accumulate(np.clip(v, 0.0, 1.0)) * (1.0 - n * _EPS) + _EPS * np.arange(n)
    return x, v
