"""Prediction points + labels + features in one frame, and the time split."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from featurelib.task_features import TASK_FEATURE_NAMES, task_features_frame
from training.labels import PointConfig, add_labels, data_bounds, label_column, prediction_points

Reporter = Callable[[str], None]


def _noop(_: str) -> None:
    return None


@dataclass(frozen=True, slots=True)
class FailureDataset:
    """One row per prediction point: ids, ``now_us``, ``kind``, label columns, features."""

    frame: pl.DataFrame
    horizons_us: tuple[int, ...]
    failure_types: tuple[int, ...]
    data_start_us: int
    data_end_us: int

    def features(self, mask: np.ndarray | None = None) -> np.ndarray:
        """float32 matrix in ``TASK_FEATURE_NAMES`` order (NaN = missing)."""
        x = self.frame.select(TASK_FEATURE_NAMES).to_numpy().astype(np.float32)
        return x if mask is None else x[mask]

    def times(self) -> np.ndarray:
        return self.frame["now_us"].to_numpy()

    def labels(self, horizon_us: int) -> np.ndarray:
        """Labels as float (NaN = censored)."""
        return self.frame[label_column(horizon_us)].cast(pl.Float64).fill_null(np.nan).to_numpy()


def build_dataset(events: pl.DataFrame, horizons_us: tuple[int, ...], failure_types: tuple[int, ...],
                  points: PointConfig = PointConfig(), progress: Reporter = _noop, *,
                  point_range: tuple[int, int] | None = None, data_end_us: int | None = None) -> FailureDataset:
    """Points, labels and features from a canonical task-events frame.

    ``point_range`` keeps points with ``lo <= now < hi``; ``data_end_us`` overrides the end of the
    data for censoring (when ``events`` was cut after the last label window that matters).
    """
    started = time.perf_counter()
    start, end = data_bounds(events)
    end = end if data_end_us is None else data_end_us
    pts = prediction_points(events, points)
    if point_range is not None:
        pts = pts.filter((pl.col("now_us") >= point_range[0]) & (pl.col("now_us") < point_range[1]))
    pts = add_labels(pts, horizons_us, failure_types, end)
    progress(f"prediction points: {pts.height:,} ({pts.filter(pl.col('kind') == 'schedule').height:,} at "
             f"SCHEDULE, rest checkpoints) in {time.perf_counter() - started:.1f}s")
    started = time.perf_counter()
    frame = task_features_frame(events, pts)
    progress(f"features: {len(TASK_FEATURE_NAMES)} x {frame.height:,} in {time.perf_counter() - started:.1f}s")
    return FailureDataset(frame, horizons_us, failure_types, start, end)


@dataclass(frozen=True, slots=True)
class ColdStartConfig:
    """Extra training rows whose history starts late, like a later window of the trace.

    A directory of later part files has no history before its first event: every count
    restarts and runs already in progress have no start. ``views`` cut times spread over the
    training window each give the points of ``span_us`` after their warm-up, with features
    computed from the events after the cut only (labels are unchanged).
    """

    views: int = 3
    span_us: int = 3 * 3_600_000_000


def cold_start_views(events: pl.DataFrame, train_end_us: int, horizons_us: tuple[int, ...],
                     failure_types: tuple[int, ...], points: PointConfig, config: ColdStartConfig,
                     progress: Reporter = _noop) -> tuple[FailureDataset | None, list[int]]:
    """Training rows from ``config.views`` late starts inside ``[data start, train_end_us)``."""
    start, end = data_bounds(events)
    horizon = max(horizons_us)
    frames, cuts = [], []
    for k in range(1, config.views + 1):
        cut = start + k * (train_end_us - start) // (config.views + 1)
        lo = cut + points.warmup_us
        hi = min(lo + config.span_us, train_end_us)
        if lo >= hi:
            continue
        last = min(hi + horizon, end)
        view = events.filter((pl.col("time_us") >= cut) & (pl.col("time_us") <= last))
        progress(f"cold-start view from {cut / 1e6:,.0f}s: points in [{lo / 1e6:,.0f}s, {hi / 1e6:,.0f}s)")
        ds = build_dataset(view, horizons_us, failure_types, points, progress, point_range=(lo, hi), data_end_us=last)
        frames.append(ds.frame)
        cuts.append(cut)
    if not frames:
        return None, []
    return FailureDataset(pl.concat(frames), horizons_us, failure_types, start, end), cuts


@dataclass(frozen=True, slots=True)
class TimeSplit:
    """Train on ``now < train_end_us``; test on ``now >= test_start_us`` (gap >= max horizon)."""

    train_end_us: int
    test_start_us: int

    def train_mask(self, times: np.ndarray) -> np.ndarray:
        return times < self.train_end_us

    def test_mask(self, times: np.ndarray) -> np.ndarray:
        return times >= self.test_start_us


def time_split(first_us: int, last_us: int, train_fraction: float, gap_us: int) -> TimeSplit:
    """Split ``[first_us, last_us]`` at ``train_fraction`` of its length, leaving ``gap_us`` unused."""
    if not 0.0 < train_fraction < 1.0:
        raise ValueError("train fraction must be in (0, 1)")
    cut = first_us + int((last_us - first_us) * train_fraction)
    return TimeSplit(train_end_us=cut, test_start_us=cut + gap_us)
