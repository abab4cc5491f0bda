"""Reference profiles for drift detection, and the PSI that compares live data with them.

A model directory ships ``reference_profile.json`` (written at training time, or added later by
``python -m training.drift_reference``): per model input, quantile bin edges taken from the
training set, the share of valid training values in each bin and the share missing (NaN); and
the distribution of the model's predictions on the same rows. The drift stage bins live inputs
with the same edges, so both sides of a PSI always use identical bins.

Pure (numpy only): shared by training (which writes profiles) and services/drift (which reads them).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

PROFILE_FILE: Final = "reference_profile.json"
PROFILE_VERSION: Final = "drift-profile-v1"
DEFAULT_BINS: Final = 10
PSI_FLOOR: Final = 1e-4
"""Smallest share a bin counts with in PSI: an empty bin on one side would make the log infinite.
1e-4 caps one empty bin's term at about share x 9.2."""


@dataclass(frozen=True)
class BinnedProfile:
    """One input (or numeric prediction): interior bin edges and the reference share per bin."""

    name: str
    edges: tuple[float, ...]
    """Sorted, unique interior cut points; ``len(edges) + 1`` bins. A value v falls in bin
    ``#(edges <= v)`` (numpy ``searchsorted(..., side="right")``)."""
    proportions: tuple[float, ...]
    """Share of the valid reference values in each bin (sums to 1; all 0 when none was valid)."""
    missing_rate: float
    """Share of reference rows where the value was missing (NaN)."""

    @property
    def bins(self) -> int:
        return len(self.edges) + 1


@dataclass(frozen=True)
class ReferenceProfile:
    model: str
    model_version: str
    rows: int
    source: str
    """What the reference rows are (the training set, or how they were regenerated)."""
    features: tuple[BinnedProfile, ...]
    classes: dict[str, float] = field(default_factory=dict)
    """Share of each predicted class (categorical models; may include an abstention class)."""
    outputs: tuple[BinnedProfile, ...] = ()
    """Binned numeric predictions (e.g. a probability per horizon)."""

    def feature_names(self) -> list[str]:
        return [f.name for f in self.features]

    def to_json(self) -> dict[str, Any]:
        def binned(p: BinnedProfile) -> dict[str, Any]:
            return {"name": p.name, "edges": list(p.edges), "proportions": list(p.proportions),
                    "missing_rate": p.missing_rate}

        return {"profile_version": PROFILE_VERSION, "model": self.model, "model_version": self.model_version,
                "rows": self.rows, "source": self.source, "features": [binned(p) for p in self.features],
                "classes": dict(self.classes), "outputs": [binned(p) for p in self.outputs]}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> ReferenceProfile:
        if data.get("profile_version") != PROFILE_VERSION:
            raise ValueError(f"profile_version {data.get('profile_version')!r} is not {PROFILE_VERSION!r}")

        def binned(d: Mapping[str, Any]) -> BinnedProfile:
            edges = tuple(float(e) for e in d["edges"])
            props = tuple(float(p) for p in d["proportions"])
            if len(props) != len(edges) + 1 or list(edges) != sorted(set(edges)):
                raise ValueError(f"{d.get('name')}: {len(edges)} edges need {len(edges) + 1} sorted bins")
            return BinnedProfile(str(d["name"]), edges, props, float(d["missing_rate"]))

        return ReferenceProfile(
            model=str(data["model"]), model_version=str(data["model_version"]), rows=int(data["rows"]),
            source=str(data["source"]), features=tuple(binned(d) for d in data["features"]),
            classes={str(k): float(v) for k, v in (data.get("classes") or {}).items()},
            outputs=tuple(binned(d) for d in data.get("outputs") or []),
        )


def quantile_edges(values: np.ndarray, bins: int = DEFAULT_BINS) -> tuple[float, ...]:
    """Interior quantile cut points of the finite values (duplicates merged: discrete inputs get fewer bins)."""
    finite = values[np.isfinite(values)].astype(np.float64)
    if finite.size == 0 or bins < 2:
        return ()
    # observed values as cut points (not interpolated): a discrete input keeps its own levels
    qs = np.quantile(finite, np.linspace(0.0, 1.0, bins + 1)[1:-1], method="inverted_cdf")
    # a cut at the minimum would leave its bin empty in the reference: drop it
    return tuple(float(e) for e in np.unique(qs) if e > finite.min())


def bin_counts(values: np.ndarray, edges: Sequence[float]) -> tuple[np.ndarray, int]:
    """Counts per bin of the finite values, and how many were missing (NaN / inf)."""
    finite = np.isfinite(values)
    idx = np.searchsorted(np.asarray(edges, dtype=np.float64), values[finite].astype(np.float64), side="right")
    return np.bincount(idx, minlength=len(edges) + 1).astype(np.int64), int((~finite).sum())


def profile_column(name: str, values: np.ndarray, bins: int = DEFAULT_BINS) -> BinnedProfile:
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    edges = quantile_edges(values, bins)
    counts, missing = bin_counts(values, edges)
    valid = int(counts.sum())
    props = counts / valid if valid else np.zeros(len(counts))
    return BinnedProfile(name, edges, tuple(float(p) for p in props), missing / max(1, values.size))


def build_profile(*, model: str, model_version: str, source: str, x: np.ndarray, names: Sequence[str],
                  classes: Sequence[str] | None = None, predicted: Sequence[str] | np.ndarray | None = None,
                  outputs: Mapping[str, np.ndarray] | None = None, bins: int = DEFAULT_BINS) -> ReferenceProfile:
    """The profile of feature matrix ``x`` (rows x ``names``; NaN = missing) and its predictions.

    ``predicted``: one class name per row (its shares over ``classes``); ``outputs``: numeric
    predictions per name, binned like features.
    """
    if x.ndim != 2 or x.shape[1] != len(names):
        raise ValueError(f"x has shape {x.shape}, expected (rows, {len(names)})")
    shares: dict[str, float] = {}
    if predicted is not None:
        labels = [str(p) for p in predicted]
        if len(labels) != x.shape[0]:
            raise ValueError(f"{len(labels)} predictions for {x.shape[0]} rows")
        keys = list(classes) if classes is not None else sorted(set(labels))
        unknown = set(labels) - set(keys)
        if unknown:
            raise ValueError(f"predictions outside the classes: {sorted(unknown)[:5]}")
        shares = {k: labels.count(k) / max(1, len(labels)) for k in keys}
    return ReferenceProfile(
        model=model, model_version=model_version, rows=int(x.shape[0]), source=source,
        features=tuple(profile_column(n, x[:, i], bins) for i, n in enumerate(names)), classes=shares,
        outputs=tuple(profile_column(n, np.asarray(v), bins) for n, v in (outputs or {}).items()),
    )


def psi(expected: Sequence[float] | np.ndarray, actual_counts: Sequence[float] | np.ndarray,
        floor: float = PSI_FLOOR) -> float:
    """Population stability index of live ``actual_counts`` against reference shares ``expected``.

    sum_i (a_i - e_i) ln(a_i / e_i), both sides floored at ``floor``; NaN when there are no live
    values (no data: no claim). 0 = identical; by convention < 0.1 stable, > 0.25 a real shift.
    """
    counts = np.asarray(actual_counts, dtype=np.float64)
    total = counts.sum()
    if total <= 0:
        return math.nan
    e = np.maximum(np.asarray(expected, dtype=np.float64), floor)
    a = np.maximum(counts / total, floor)
    if e.shape != a.shape:
        raise ValueError(f"{e.shape[0]} reference bins, {a.shape[0]} live bins")
    return float(np.sum((a - e) * np.log(a / e)))


def write_profile(version_dir: Path, profile: ReferenceProfile) -> Path:
    path = version_dir / PROFILE_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(profile.to_json(), indent=1) + "\n")
    tmp.replace(path)
    return path


def read_profile(version_dir: Path) -> ReferenceProfile:
    return ReferenceProfile.from_json(json.loads((version_dir / PROFILE_FILE).read_text()))
