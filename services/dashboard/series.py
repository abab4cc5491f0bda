"""Bounded time series for sparklines, and rates from monotonically growing totals.

A `Series` holds at most ``window_ms / bucket_ms + 1`` points: samples falling into the same bucket
merge (latest value, or the maximum so a short spike is not hidden). Every point remembers the state
version that last changed it, so a client that has seen version ``v`` only needs the points changed
after ``v`` (a few per second, whatever the number of nodes).
"""

from __future__ import annotations

import bisect
from collections import deque
from typing import Any, Literal

Combine = Literal["last", "max"]
Point = tuple[int, float, int]  # (bucket start ms, value, version)
SeriesView = dict[str, Any]


class Series:
    __slots__ = ("_points", "bucket_ms", "combine", "window_ms")

    def __init__(self, *, bucket_ms: int, window_ms: int, combine: Combine = "last") -> None:
        if bucket_ms <= 0 or window_ms < bucket_ms:
            raise ValueError("need 0 < bucket_ms <= window_ms")
        self.bucket_ms = bucket_ms
        self.window_ms = window_ms
        self.combine = combine
        self._points: list[Point] = []

    def __len__(self) -> int:
        return len(self._points)

    def add(self, ts_ms: int, value: float, version: int) -> bool:
        """Record one sample; False when it is older than the window (nothing changed)."""
        bucket = ts_ms - ts_ms % self.bucket_ms
        points = self._points
        newest = points[-1][0] if points else bucket
        if bucket < newest - self.window_ms:
            return False
        value = round(float(value), 4)
        i = bisect.bisect_left(points, bucket, key=lambda p: p[0])
        if i < len(points) and points[i][0] == bucket:
            old = points[i][1]
            merged = max(old, value) if self.combine == "max" else value
            points[i] = (bucket, merged, version)
        else:
            points.insert(i, (bucket, value, version))
        cutoff = points[-1][0] - self.window_ms
        drop = 0
        while drop < len(points) and points[drop][0] < cutoff:
            drop += 1
        if drop:
            del points[:drop]
        return True

    def view(self, since: int | None = None) -> SeriesView:
        """Compact JSON form: ``{"s": first bucket ms, "d": bucket ms, "v": [value or None per bucket]}``.

        With `since`, from the oldest point changed after that version to the newest (a browser merges
        it by bucket); ``"s": None`` when nothing changed. One number per bucket instead of a
        (timestamp, value) pair keeps a full snapshot of a thousand nodes around a megabyte.
        """
        points = self._points
        first = 0
        if since is not None:
            first = next((i for i, p in enumerate(points) if p[2] > since), len(points))
        if first >= len(points):
            return {"s": None, "d": self.bucket_ms, "v": []}
        start = points[first][0]
        values: list[float | None] = [None] * ((points[-1][0] - start) // self.bucket_ms + 1)
        for bucket, value, _ in points[first:]:
            values[(bucket - start) // self.bucket_ms] = value
        return {"s": start, "d": self.bucket_ms, "v": values}

    def points(self) -> list[tuple[int, float]]:
        return [(b, v) for b, v, _ in self._points]

    def last(self) -> float | None:
        return self._points[-1][1] if self._points else None


class RateWindow:
    """Messages per second from samples of a growing total (e.g. a topic's summed end offsets)."""

    __slots__ = ("_samples", "window_ms")

    def __init__(self, *, window_ms: int = 10_000, max_samples: int = 64) -> None:
        self.window_ms = window_ms
        self._samples: deque[tuple[int, int]] = deque(maxlen=max_samples)

    def add(self, ts_ms: int, total: int) -> None:
        if self._samples and total < self._samples[-1][1]:
            self._samples.clear()  # topic recreated or truncated: start over rather than report a negative rate
        self._samples.append((ts_ms, total))

    @property
    def total(self) -> int:
        return self._samples[-1][1] if self._samples else 0

    def rate(self) -> float:
        """Per second over the newest `window_ms` of samples (0 with fewer than two samples)."""
        if len(self._samples) < 2:
            return 0.0
        end_ts, end_total = self._samples[-1]
        start_ts, start_total = self._samples[-2]  # at least the previous sample, however old
        for ts, total in reversed(self._samples):
            if end_ts - ts > self.window_ms:
                break
            if ts < start_ts:
                start_ts, start_total = ts, total
        if end_ts <= start_ts:
            return 0.0
        return (end_total - start_total) * 1000.0 / (end_ts - start_ts)
