"""Prediction points from per-VM series: features (featurelib.load_features), targets, baselines.

A point is a closed bucket ``k`` of a VM whose CPU and memory values are both present (a node
that reported in that bucket). Its targets are the bucket means ``k + S`` for S in HORIZON_STEPS
(NaN when that bucket is empty: the point is not scored at that horizon). Times: ``now_s`` is
the end of bucket k (when the forecast is made), ``target_s`` the end of bucket k + S.
Baselines come from the features themselves, so ``eval`` scores them on any data:
persistence = ``<r>_last``, moving average = ``<r>_mean_1h``, seasonal naive = ``<r>_day_hS``
(yesterday at the target time), falling back to persistence when yesterday is empty.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import numpy as np

from featurelib.load_features import (
    HORIZON_STEPS,
    LOAD_FEATURE_INDEX,
    N_LOAD_FEATURES,
    RESOURCES,
    STEP_S,
    bucketize,
    load_features_matrix,
)
from training.forecast.bitbrains import Series

BASELINES: Final = ("persistence", "moving_average_1h", "seasonal_naive")


@dataclass(frozen=True, slots=True)
class Points:
    x: np.ndarray
    """float32 [n, N_LOAD_FEATURES]"""
    y: np.ndarray
    """float64 [n, resources, horizons]; NaN = target bucket empty"""
    now_s: np.ndarray
    vm: np.ndarray
    """int32 index into ``vms``"""
    vms: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.now_s)

    def target_s(self, h: int) -> np.ndarray:
        return self.now_s + HORIZON_STEPS[h] * STEP_S

    def take(self, mask: np.ndarray) -> Points:
        return Points(self.x[mask], self.y[mask], self.now_s[mask], self.vm[mask], self.vms)


def series_points(series: Series, select: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features float64 [n, F], targets [n, R, H], now_s) of one VM's points (``select(now_s, y)`` -> mask)."""
    first, buckets = bucketize(series.time_s, series.cpu_pct, series.mem_pct)
    n = len(buckets)
    y = np.full((n, len(RESOURCES), len(HORIZON_STEPS)), np.nan)
    for h, s in enumerate(HORIZON_STEPS):
        if n > s:
            y[: n - s, :, h] = buckets[s:, :]
    now_s = (np.arange(n, dtype=np.int64) + first + 1) * STEP_S
    ok = ~np.isnan(buckets).any(axis=1) if n else np.zeros(0, dtype=bool)
    rows = np.flatnonzero(ok)
    if select is not None:
        rows = rows[select(now_s[rows], y[rows])]
    return load_features_matrix(first, buckets, rows), y[rows], now_s[rows]


def build_points(series: list[Series], select: Callable[[np.ndarray, np.ndarray], np.ndarray],
                 progress: Callable[[str], None] | None = None) -> Points:
    """Points of every series; ``select(now_s, y)`` -> boolean mask of the buckets to keep."""
    xs, ys, ts, vs = [], [], [], []
    for i, s in enumerate(series):
        feats, y, now_s = series_points(s, select)
        xs.append(feats.astype(np.float32))
        ys.append(y)
        ts.append(now_s)
        vs.append(np.full(len(now_s), i, dtype=np.int32))
        if progress is not None and (i + 1) % 50 == 0:
            progress(f"features: {i + 1}/{len(series)} VMs")
    if not xs:
        return Points(np.zeros((0, N_LOAD_FEATURES), np.float32), np.zeros((0, len(RESOURCES), len(HORIZON_STEPS))),
                      np.zeros(0, np.int64), np.zeros(0, np.int32), ())
    return Points(np.concatenate(xs), np.concatenate(ys), np.concatenate(ts), np.concatenate(vs),
                  tuple(s.vm for s in series))


def base_index(resource: int) -> int:
    """Column of the value the model's output is added to (the last bucket)."""
    return LOAD_FEATURE_INDEX[f"{RESOURCES[resource]}_last"]


def baseline(x: np.ndarray, name: str, resource: int, h: int) -> np.ndarray:
    r = RESOURCES[resource]
    last = x[:, LOAD_FEATURE_INDEX[f"{r}_last"]].astype(np.float64)
    if name == "persistence":
        return last
    if name == "moving_average_1h":
        return x[:, LOAD_FEATURE_INDEX[f"{r}_mean_1h"]].astype(np.float64)
    if name == "seasonal_naive":
        day = x[:, LOAD_FEATURE_INDEX[f"{r}_day_h{HORIZON_STEPS[h]}"]].astype(np.float64)
        return np.where(np.isnan(day), last, day)
    raise ValueError(name)
