"""Node load-forecast features: the ONE definition, used by the forecast trainer and (later) the stage.

The forecaster reads a node's (or VM's) own utilisation history on a fixed grid of
``STEP_S`` = 300 s *buckets* aligned on the epoch: bucket ``k`` covers ``[k*300, (k+1)*300)``
seconds, and its value is the mean of the samples (CPU %, memory %, 0..100) whose time falls
in it (NaN when it has none, per resource). A 5-minute trace (Bitbrains) has one sample per
bucket; a node agent's 1 s or a features stage's 10 s samples are averaged into the bucket.

Two implementations, proven identical by ``tests/unit/test_load_features.py``:

* :class:`LoadHistory` — incremental, pure Python, for the online stage: ``observe(t_s, cpu, mem)``
  in arrival order; a sample in a later bucket closes the current one (``close(now_s)`` closes it
  on time alone); ``features()`` is the vector at the last closed bucket.
* :func:`bucketize` + :func:`load_features_matrix` — vectorised numpy, for training: one row per
  bucket of a dense grid.

Semantics (both): samples are taken in input order; a sample whose bucket is earlier than the
latest bucket already seen is *late* and dropped (online the bucket is closed and may already
have been forecast from). The features at bucket ``k`` read buckets ``<= k`` only — nothing
from the future. Every sum is a left-to-right float64 sum in the same order in both
implementations (no pairwise summation, no transcendental functions), so they agree bit for bit.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Sequence
from typing import Final

import numpy as np

FEATURE_SCHEMA_VERSION: Final = "load-features-v1"
STEP_S: Final = 300
"""Bucket length (the Bitbrains sampling interval)."""
DAY: Final = 86_400 // STEP_S
"""Buckets per day (288): the seasonal lag."""
HORIZON_STEPS: Final[tuple[int, ...]] = (1, 3, 6)
"""Forecast horizons in buckets: 5, 15 and 30 minutes ahead."""
RESOURCES: Final[tuple[str, ...]] = ("cpu", "mem")
LAGS: Final[tuple[int, ...]] = (1, 2, 3, 6, 12)
MEANS: Final[tuple[tuple[str, int], ...]] = (("15m", 3), ("1h", 12), ("1d", DAY))
HOUR: Final = 12
"""Buckets in the last hour (std / min / max / valid fraction window, moving-average baseline)."""
HISTORY: Final = DAY + 1
"""Closed buckets a history keeps: the deepest read is ``k - DAY`` (seasonal lag of the current bucket)."""
_SNAPSHOT_VERSION: Final = 1
_SNAPSHOT_HEAD: Final = struct.calcsize("<Bqqi")
_SNAPSHOT_ITEM: Final = struct.calcsize("<qdd")


def _resource_names(r: str) -> list[str]:
    return [
        f"{r}_last",
        *(f"{r}_lag{j}" for j in LAGS),
        *(f"{r}_mean_{label}" for label, _ in MEANS),
        f"{r}_std_1h",
        f"{r}_min_1h",
        f"{r}_max_1h",
        f"{r}_valid_1h",
        f"{r}_day_h0",
        *(f"{r}_day_h{s}" for s in HORIZON_STEPS),
    ]


LOAD_FEATURE_NAMES: Final[tuple[str, ...]] = (
    *(name for r in RESOURCES for name in _resource_names(r)),
    "hour_of_day",
    "day_of_week",
)
"""``<r>_last`` = bucket k; ``_lagJ`` = bucket k-J; ``_mean_*`` = mean of the valid buckets in the last
3 / 12 / 288 (NaN if none); ``_std_1h`` population std of the valid last 12 (NaN if < 2); ``_min/_max_1h``;
``_valid_1h`` = valid fraction of the last 12; ``_day_h0`` = bucket k-288 (same time yesterday) and
``_day_hS`` = bucket k+S-288 (yesterday at the target time of horizon S). ``hour_of_day`` (UTC, 0..24,
of the bucket's end) and ``day_of_week`` (0 = Monday, UTC) of the bucket end."""
N_LOAD_FEATURES: Final = len(LOAD_FEATURE_NAMES)
LOAD_FEATURE_INDEX: Final = {name: i for i, name in enumerate(LOAD_FEATURE_NAMES)}
_PER_RESOURCE: Final = len(_resource_names("cpu"))


def load_feature_schema_hash() -> str:
    """Covers version, bucket length, horizons and the ordered names: a model on another definition is refused."""
    text = "\n".join([FEATURE_SCHEMA_VERSION, str(STEP_S), ",".join(map(str, HORIZON_STEPS)), *LOAD_FEATURE_NAMES])
    return hashlib.sha256(text.encode()).hexdigest()


def bucket_of(t_s: float) -> int:
    return math.floor(t_s / STEP_S)


def _clock(k: int) -> tuple[float, float]:
    end_s = (k + 1) * STEP_S
    day = end_s // 86_400
    return float(end_s - day * 86_400) / 3600.0, float((day + 3) % 7)  # 1970-01-01 was a Thursday


def _window_stats(xs: Sequence[float]) -> tuple[float, int]:
    """Left-to-right sum of the valid values (NaN adds 0.0) and their count."""
    total = 0.0
    n = 0
    for x in xs:
        if x == x:
            total += x
            n += 1
        else:
            total += 0.0
    return total, n


def _resource_features(hist: Sequence[float]) -> list[float]:
    """``hist[j]`` = bucket k-j (j = 0..HISTORY-1), NaN where empty."""
    nan = math.nan
    out = [hist[0], *(hist[j] for j in LAGS)]
    for _, width in MEANS:
        total, n = _window_stats(hist[:width])
        out.append(total / n if n else nan)
    hour = hist[:HOUR]
    total, n = _window_stats(hour)
    if n >= 2:
        mean = total / n
        sq = 0.0
        for x in hour:
            sq += (x - mean) * (x - mean) if x == x else 0.0
        out.append(math.sqrt(sq / n))
    else:
        out.append(nan)
    valid = [x for x in hour if x == x]
    out.append(min(valid) if valid else nan)
    out.append(max(valid) if valid else nan)
    out.append(n / HOUR)
    out.append(hist[DAY])
    out.extend(hist[DAY - s] for s in HORIZON_STEPS)
    return out


class LoadHistory:
    """One node's bucketed utilisation history (online). Pure Python; small state (HISTORY buckets)."""

    def __init__(self) -> None:
        self._closed: dict[int, tuple[float, float]] = {}
        self.last_closed: int | None = None
        self._current: int | None = None
        self._sums = [0.0, 0.0]
        self._counts = [0, 0]
        self.late = 0

    def observe(self, t_s: float, cpu: float, mem: float) -> int | None:
        """Add a sample (percent, NaN = not measured); returns the bucket it closed, if any."""
        b = bucket_of(t_s)
        closed: int | None = None
        if self.last_closed is not None and b <= self.last_closed:
            self.late += 1
            return None
        if self._current is None:
            self._current = b
        elif b < self._current:
            self.late += 1
            return None
        elif b > self._current:
            closed = self._close()
            self._current = b
        for i, x in enumerate((cpu, mem)):
            if x == x:
                self._sums[i] += x
                self._counts[i] += 1
        return closed

    def close(self, now_s: float) -> int | None:
        """Close the current bucket once ``now_s`` has passed its end (no sample needed).

        For the online stage only (a node that went quiet); the batch path closes buckets on samples, so
        parity is defined for histories driven by ``observe`` alone."""
        if self._current is None or now_s < (self._current + 1) * STEP_S:
            return None
        closed = self._close()
        self._current = None
        return closed

    def _close(self) -> int:
        k = self._current
        assert k is not None
        values = tuple(self._sums[i] / self._counts[i] if self._counts[i] else math.nan for i in range(2))
        self._closed[k] = (values[0], values[1])
        self._sums = [0.0, 0.0]
        self._counts = [0, 0]
        self.last_closed = k
        for old in [key for key in self._closed if key <= k - HISTORY]:
            del self._closed[old]
        return k

    def valid_buckets(self) -> int:
        """Closed buckets kept (the last ``HISTORY``) with a CPU or memory sample."""
        return sum(1 for cpu, mem in self._closed.values() if cpu == cpu or mem == mem)

    def snapshot(self) -> bytes:
        """The closed buckets (not the open one) as bytes, for a changelog; ``from_snapshot`` reads it back.

        The open bucket is left out on purpose: after a restart the stage re-reads its input from the
        committed offset, so the open bucket is rebuilt from those samples instead of counting some twice."""
        items = sorted(self._closed.items())
        head = struct.pack("<Bqqi", _SNAPSHOT_VERSION, -1 if self.last_closed is None else self.last_closed,
                           self.late, len(items))
        return head + b"".join(struct.pack("<qdd", k, cpu, mem) for k, (cpu, mem) in items)

    @classmethod
    def from_snapshot(cls, data: bytes) -> LoadHistory:
        """A history holding a snapshot's closed buckets (raises ``ValueError`` on other bytes)."""
        try:
            version, last, late, n = struct.unpack_from("<Bqqi", data)
            if version != _SNAPSHOT_VERSION or len(data) != _SNAPSHOT_HEAD + n * _SNAPSHOT_ITEM:
                raise ValueError(f"not a version {_SNAPSHOT_VERSION} load-history snapshot of {n} buckets")
            history = cls()
            for i in range(n):
                k, cpu, mem = struct.unpack_from("<qdd", data, _SNAPSHOT_HEAD + i * _SNAPSHOT_ITEM)
                history._closed[k] = (cpu, mem)
        except struct.error as exc:
            raise ValueError(f"truncated load-history snapshot ({exc})") from None
        history.last_closed = None if last < 0 else last
        history.late = late
        return history

    def features(self) -> list[float] | None:
        """The feature vector at the last closed bucket (None before any bucket closed)."""
        k = self.last_closed
        if k is None:
            return None
        nan = (math.nan, math.nan)
        rows = [self._closed.get(k - j, nan) for j in range(HISTORY)]
        out: list[float] = []
        for i in range(len(RESOURCES)):
            out.extend(_resource_features([row[i] for row in rows]))
        out.extend(_clock(k))
        return out


def bucketize(t_s: np.ndarray, cpu: np.ndarray, mem: np.ndarray) -> tuple[int, np.ndarray]:
    """Samples in input order -> (first bucket, float64 [n_buckets, 2] bucket means; NaN = empty).

    Late samples (bucket below the running maximum) are dropped, as :class:`LoadHistory` does.
    """
    if len(t_s) == 0:
        return 0, np.zeros((0, 2))
    b = np.floor(np.asarray(t_s, dtype=np.float64) / STEP_S).astype(np.int64)
    keep = b == np.maximum.accumulate(b)
    b = b[keep]
    values = np.stack([np.asarray(cpu, dtype=np.float64)[keep], np.asarray(mem, dtype=np.float64)[keep]], axis=1)
    first = int(b[0])
    idx = b - first
    n = int(idx[-1]) + 1
    sums = np.zeros((n, 2))
    counts = np.zeros((n, 2), dtype=np.int64)
    # rank of each sample inside its bucket, so sums are added in input order (as online)
    starts = np.r_[0, np.flatnonzero(np.diff(idx)) + 1]
    rank = np.arange(len(idx)) - np.repeat(starts, np.diff(np.r_[starts, len(idx)]))
    for r in range(int(rank.max()) + 1 if len(rank) else 0):
        sel = rank == r
        for i in range(2):
            v = values[sel, i]
            ok = ~np.isnan(v)
            rows = idx[sel][ok]
            sums[rows, i] += v[ok]
            counts[rows, i] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return first, means


def _shift(x: np.ndarray, rows: np.ndarray, j: int) -> np.ndarray:
    """``out[i] = x[rows[i] - j]`` (NaN before the start). ``j >= 0`` always: nothing after a row is read."""
    assert j >= 0
    src = rows - j
    ok = src >= 0
    out = np.full(len(rows), np.nan)
    out[ok] = x[src[ok]]
    return out


def _window_sum(x: np.ndarray, rows: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    total = np.zeros(len(rows))
    n = np.zeros(len(rows), dtype=np.int64)
    for j in range(width):
        s = _shift(x, rows, j)
        ok = ~np.isnan(s)
        total += np.where(ok, s, 0.0)
        n += ok
    return total, n


def _resource_matrix(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    cols: list[np.ndarray] = [_shift(x, rows, 0), *(_shift(x, rows, j) for j in LAGS)]
    with np.errstate(invalid="ignore", divide="ignore"):
        for _, width in MEANS:
            total, n = _window_sum(x, rows, width)
            cols.append(np.where(n > 0, total / np.maximum(n, 1), np.nan))
        total, n = _window_sum(x, rows, HOUR)
        mean = total / np.maximum(n, 1)
        sq = np.zeros(len(rows))
        lo = np.full(len(rows), np.inf)
        hi = np.full(len(rows), -np.inf)
        for j in range(HOUR):
            s = _shift(x, rows, j)
            ok = ~np.isnan(s)
            d = s - mean
            sq += np.where(ok, d * d, 0.0)
            lo = np.where(ok, np.minimum(lo, s), lo)
            hi = np.where(ok, np.maximum(hi, s), hi)
        cols.append(np.where(n >= 2, np.sqrt(sq / np.maximum(n, 1)), np.nan))
        cols.append(np.where(n > 0, lo, np.nan))
        cols.append(np.where(n > 0, hi, np.nan))
        cols.append(n / HOUR)
    cols.append(_shift(x, rows, DAY))
    cols.extend(_shift(x, rows, DAY - s) for s in HORIZON_STEPS)
    return np.stack(cols, axis=1)


def load_features_matrix(first_bucket: int, buckets: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """float64 [len(rows), N_LOAD_FEATURES]: the features at buckets ``first_bucket + rows`` (default: all).

    Computing only the rows needed gives the same numbers (same sums in the same order), faster.
    """
    idx = np.arange(len(buckets), dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    if len(idx) == 0:
        return np.zeros((0, N_LOAD_FEATURES))
    parts = [_resource_matrix(buckets[:, i], idx) for i in range(len(RESOURCES))]
    end_s = (idx + first_bucket + 1) * STEP_S
    day = end_s // 86_400
    hour = (end_s - day * 86_400).astype(np.float64) / 3600.0
    dow = ((day + 3) % 7).astype(np.float64)
    out = np.concatenate([*parts, hour[:, None], dow[:, None]], axis=1)
    assert out.shape[1] == N_LOAD_FEATURES == 2 * _PER_RESOURCE + 2
    return out
