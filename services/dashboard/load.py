"""Per-node load: actual utilisation (features.v1) beside the load forecast (forecasts.v1), and its error.

Actual load is bucketed exactly as the forecast stage buckets it (``featurelib.load_serving.load_sample``:
each 10 s vector is one sample at its window midpoint; 5-minute buckets aligned on the epoch), because a
forecast made at ``window_end_ms`` for horizon ``h`` predicts the mean of the bucket ending ``h`` later.
A bucket closes when the node's first sample of a later bucket arrives (as in the stage); samples older
than the open bucket are late and dropped. Only closed buckets are scored.

Per node the board keeps the last ``keep_ms`` of bucket means and, per horizon, the p50/p90 each
forecast gave for its target bucket, so the chart can draw the actual beside the forecast made 5, 15
and 30 minutes earlier. The error is rolling over those kept buckets: WAPE = Σ|y − p50| / Σ|y| and
p90 coverage (share of targets ≤ p90), per resource and horizon, per node and summed over the fleet.

Two versions per node keep browser diffs small: ``live_version`` (the newest 10 s sample, changes
every vector) and ``chart_version`` (forecast, chart and error: change when a bucket closes or a
forecast arrives, i.e. about twice per node per 5 minutes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from contracts.models import LoadForecast
from featurelib.load_features import HORIZON_STEPS, STEP_S, bucket_of
from featurelib.load_serving import load_sample
from featurelib.node.schema import N_FEATURES, node_feature_schema_hash

JsonDict = dict[str, Any]
BUCKET_MS: Final = STEP_S * 1000
HORIZONS_S: Final = tuple(int(s * STEP_S) for s in HORIZON_STEPS)
RESOURCES: Final = ("cpu", "memory")
RESET_MS: Final = 24 * 3600 * 1000
"""A sample this far behind the node's open bucket starts the node afresh (a new replay or a reset clock,
as the forecast stage decides), rather than being dropped as late forever."""


@dataclass(slots=True)
class Bucket:
    """Sums of one 5-minute bucket's samples (fractions 0..1); NaN samples are not counted."""

    cpu_sum: float = 0.0
    cpu_n: int = 0
    mem_sum: float = 0.0
    mem_n: int = 0

    def add(self, cpu: float, mem: float) -> None:
        if cpu == cpu:
            self.cpu_sum += cpu
            self.cpu_n += 1
        if mem == mem:
            self.mem_sum += mem
            self.mem_n += 1

    def mean(self, resource: str) -> float | None:
        if resource == "cpu":
            return self.cpu_sum / self.cpu_n if self.cpu_n else None
        return self.mem_sum / self.mem_n if self.mem_n else None


@dataclass(slots=True)
class ErrorSums:
    """Rolling error of one resource at one horizon: what WAPE and coverage are made of."""

    abs_err: float = 0.0
    actual: float = 0.0
    covered: int = 0
    n: int = 0

    def add(self, other: ErrorSums) -> None:
        self.abs_err += other.abs_err
        self.actual += other.actual
        self.covered += other.covered
        self.n += other.n

    def view(self) -> JsonDict:
        return {
            "wape": round(self.abs_err / self.actual, 4) if self.actual > 0 else None,
            "p90_coverage": round(self.covered / self.n, 4) if self.n else None,
            "n": self.n,
        }


Quantiles = dict[str, tuple[float, float]]  # resource -> (p50, p90)


@dataclass(slots=True)
class LoadRow:
    name: str
    version: int
    live_version: int = 0
    chart_version: int = 0
    buckets: dict[int, Bucket] = field(default_factory=dict)  # bucket end ms -> sums
    open_end: int | None = None  # end of the newest (still open) bucket
    last: tuple[int, float, float] | None = None  # newest sample: (vector ts ms, cpu, mem), fractions or NaN
    forecast: LoadForecast | None = None
    targets: dict[int, dict[int, Quantiles]] = field(default_factory=dict)  # horizon s -> target end ms -> q
    errors: dict[tuple[str, int], ErrorSums] = field(default_factory=dict)
    cached: tuple[int, JsonDict] | None = None  # (chart_version, its view): snapshots rebuild only what changed

    def empty(self) -> bool:
        return self.last is None and self.forecast is None


def _q(forecast: LoadForecast, horizon_s: int) -> Quantiles:
    return {q.resource: (q.p50, q.p90) for q in forecast.quantiles if q.horizon_s == horizon_s}


def _r(value: float | None) -> float | None:
    return None if value is None or value != value else round(value, 4)


class LoadBoard:
    def __init__(self, *, keep_ms: int = 3600_000) -> None:
        self.keep_ms = max(keep_ms, BUCKET_MS)
        self.schema_hash = node_feature_schema_hash()
        self._rows: dict[str, LoadRow] = {}
        self._removed: dict[str, int] = {}
        self.fleet: dict[tuple[str, int], ErrorSums] = {}
        self.version = 0  # newest change of anything in the fleet summary
        self.late = 0  # samples older than their node's open bucket (dropped)
        self.mismatched = 0  # vectors of another feature schema (their columns mean something else)

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, name: str) -> LoadRow | None:
        return self._rows.get(name)

    def _row(self, name: str, version: int) -> LoadRow:
        row = self._rows.get(name)
        if row is None:
            row = self._rows[name] = LoadRow(name=name, version=version)
            self._removed.pop(name, None)
        row.version = version
        return row

    # ------------------------------------------------------------ input

    def observe_vector(self, node: str, ts_ms: int, window_s: int, values: Sequence[float],
                       valid: Sequence[bool], schema_hash: str, version: int) -> bool:
        """One features.v1 vector; False when it was not used (other feature schema, or late)."""
        if schema_hash != self.schema_hash or len(values) != N_FEATURES:
            self.mismatched += 1
            return False
        t_s, cpu, mem = load_sample(ts_ms, window_s, values, valid)
        return self.observe(node, t_s, cpu / 100.0, mem / 100.0, ts_ms, version)

    def observe(self, node: str, t_s: float, cpu: float, mem: float, ts_ms: int, version: int) -> bool:
        """One utilisation sample (fractions, NaN = not measured) at time `t_s` (seconds)."""
        end = (bucket_of(t_s) + 1) * BUCKET_MS
        existing = self._rows.get(node)
        if existing is not None and existing.open_end is not None and end < existing.open_end:
            if existing.open_end - end <= RESET_MS:
                self.late += 1
                return False
            existing.buckets.clear()
            existing.open_end = None
            existing.chart_version = version
        row = self._row(node, version)
        if row.open_end is None or end > row.open_end:
            if row.open_end is not None:
                row.chart_version = version  # the open bucket closed: it can be scored now
            row.open_end = end
            self._prune(row)
            self._rescore(row, version)
        row.buckets.setdefault(end, Bucket()).add(cpu, mem)
        row.last = (ts_ms, cpu, mem)
        row.live_version = version
        return True

    def add_forecast(self, forecast: LoadForecast, version: int) -> None:
        row = self._row(forecast.node, version)
        if row.forecast is None or forecast.window_end_ms >= row.forecast.window_end_ms:
            row.forecast = forecast
        if forecast.status == "ok":
            for h in HORIZONS_S:
                q = _q(forecast, h)
                if q:
                    row.targets.setdefault(h, {})[forecast.window_end_ms + h * 1000] = q
            self._prune(row)
        row.chart_version = self.version = version
        self._rescore(row, version)

    def forget_forecast(self, node: str, version: int) -> None:
        """A tombstone on forecasts.v1: the node's forecasts go (its actual load stays)."""
        row = self._rows.get(node)
        if row is None:
            return
        row.forecast = None
        row.targets.clear()
        row.version = row.chart_version = self.version = version
        self._rescore(row, version)
        if row.empty():
            del self._rows[node]
            self._removed[node] = version

    # ------------------------------------------------------------ bookkeeping

    def _prune(self, row: LoadRow) -> None:
        newest = max(row.open_end or 0, row.forecast.window_end_ms if row.forecast else 0)
        cutoff = newest - self.keep_ms
        for end in [e for e in row.buckets if e <= cutoff]:
            del row.buckets[end]
        for per_target in row.targets.values():
            for end in [e for e in per_target if e <= cutoff]:
                del per_target[end]

    def _rescore(self, row: LoadRow, version: int) -> None:
        """Recompute the node's rolling error over its closed buckets, and the fleet's with it."""
        fresh: dict[tuple[str, int], ErrorSums] = {}
        for h, per_target in row.targets.items():
            for end, q in per_target.items():
                bucket = row.buckets.get(end)
                if bucket is None or row.open_end is None or end >= row.open_end:
                    continue  # not measured, or not closed yet
                for resource, (p50, p90) in q.items():
                    y = bucket.mean(resource)
                    if y is None:
                        continue
                    sums = fresh.setdefault((resource, h), ErrorSums())
                    sums.abs_err += abs(y - p50)
                    sums.actual += abs(y)
                    sums.covered += y <= p90
                    sums.n += 1
        if fresh == row.errors:
            return
        for key, old in row.errors.items():
            total = self.fleet[key]
            total.abs_err -= old.abs_err
            total.actual -= old.actual
            total.covered -= old.covered
            total.n -= old.n
        for key, new in fresh.items():
            self.fleet.setdefault(key, ErrorSums()).add(new)
        row.errors = fresh
        self.version = version

    # ------------------------------------------------------------ output

    def unknown_count(self) -> int:
        return sum(1 for r in self._rows.values() if r.forecast is not None and r.forecast.status == "unknown")

    def summary(self) -> JsonDict:
        """Fleet-wide: rolling error per resource and horizon, and how many forecasts are unknown and why."""
        reasons: dict[str, int] = {}
        forecasts = 0
        for r in self._rows.values():
            if r.forecast is not None:
                forecasts += 1
                if r.forecast.reason is not None:
                    reasons[r.forecast.reason] = reasons.get(r.forecast.reason, 0) + 1
        return {
            "nodes": len(self._rows),
            "forecasts": forecasts,
            "unknown": sum(reasons.values()),
            "reasons": reasons,
            "error": self._errors_view(self.fleet),
            "late_samples": self.late,
            "other_schema": self.mismatched,
            "horizons": list(HORIZONS_S),
            "bucket_ms": BUCKET_MS,
        }

    @staticmethod
    def _errors_view(errors: dict[tuple[str, int], ErrorSums]) -> JsonDict:
        return {
            r: {str(h): errors[(r, h)].view() for h in HORIZONS_S if (r, h) in errors and errors[(r, h)].n > 0}
            for r in RESOURCES
        }

    def view(self, row: LoadRow, since: int | None = None) -> JsonDict:
        """One node as JSON; with `since`, the chart part only when it changed after that version."""
        out: JsonDict = {"node": row.name, "v": row.version}
        if since is None or row.live_version > since:
            last = row.last
            bucket = row.buckets.get(row.open_end) if row.open_end is not None else None
            out["live"] = None if last is None else {
                "ts": last[0],
                "cpu": _r(last[1]),
                "memory": _r(last[2]),
                "bucket_end": row.open_end,
                "bucket_cpu": _r(bucket.mean("cpu")) if bucket else None,
                "bucket_memory": _r(bucket.mean("memory")) if bucket else None,
            }
        if since is None or row.chart_version > since:
            if row.cached is None or row.cached[0] != row.chart_version:
                row.cached = (row.chart_version, {
                    "forecast": self._forecast_view(row.forecast),
                    "chart": self._chart(row),
                    "error": self._errors_view(row.errors),
                })
            out |= row.cached[1]
        return out

    @staticmethod
    def _forecast_view(f: LoadForecast | None) -> JsonDict | None:
        if f is None:
            return None
        quantiles: JsonDict = {r: [] for r in RESOURCES}
        for q in sorted(f.quantiles, key=lambda q: q.horizon_s):
            quantiles[q.resource].append([q.horizon_s, round(q.p50, 4), round(q.p90, 4)])
        return {
            "status": f.status,
            "reason": f.reason,
            "window_end": f.window_end_ms,
            "ts": f.ts_ms,
            "model": f.model_version,
            "history_buckets": f.history_buckets,
            "quantiles": quantiles,
        }

    def _chart(self, row: LoadRow) -> JsonDict:
        """Bucket means and, per horizon, the p50 forecast made that long before each bucket (null: none).

        ``s`` is the first bucket's end, ``d`` the bucket length; the span runs to the furthest target of
        the latest forecast, so its future buckets show the forecast alone.
        """
        ends = set(row.buckets)
        for per_target in row.targets.values():
            ends.update(per_target)
        if not ends:
            return {"s": None, "d": BUCKET_MS, "open_end": row.open_end, "actual": {}, "forecast": {}}
        first, last = min(ends), max(ends)
        span = range(first, last + 1, BUCKET_MS)
        actual = {r: [_r(row.buckets[e].mean(r)) if e in row.buckets else None for e in span] for r in RESOURCES}
        forecast: JsonDict = {}
        for h in HORIZONS_S:
            per_target = row.targets.get(h, {})
            forecast[str(h)] = {
                r: [_r(per_target[e][r][0]) if e in per_target and r in per_target[e] else None for e in span]
                for r in RESOURCES
            }
        return {"s": first, "d": BUCKET_MS, "open_end": row.open_end, "actual": actual, "forecast": forecast}

    def rows(self, since: int | None = None) -> list[JsonDict]:
        return [self.view(r, since) for r in self._rows.values() if since is None or r.version > since]

    def removed(self, since: int | None) -> list[str]:
        if since is None:
            return []
        return [name for name, v in self._removed.items() if v > since]
