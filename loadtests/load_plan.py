"""Pure parts of the load scenarios: the step schedule, measurement windows and thresholds.

A ramp is a warm-up phase followed by one phase per offered rate. Every phase is
driven by ``loadtests.driver`` in real time: a step of R NodeState/s at a sampling
interval of I ms is R·I/1000 nodes each reporting once per interval, so event time
(``NodeState.ts_ms``) follows the wall clock, as it does on a real cluster.
Each step is measured over its hold minus a settling time at the start.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from typing import Any

from loadtests.bench_format import percentile

NODE_FORMAT = "sim-{:05d}"
QUICK_HOLD_S = 12.0
QUICK_WARMUP_S = 6.0


@dataclass(frozen=True)
class Phase:
    """One constant-rate stretch of the driver's schedule."""

    name: str
    rate: float
    seconds: float
    interval_ms: int = 1000

    @property
    def nodes(self) -> int:
        return nodes_for(self.rate, self.interval_ms)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Window:
    """Where one step is measured, in seconds since the driver's t0."""

    step: int
    offered: float
    start_s: float
    end_s: float

    def contains(self, t_s: float) -> bool:
        return self.start_s <= t_s < self.end_s

    @property
    def seconds(self) -> float:
        return max(0.0, self.end_s - self.start_s)


def node_name(i: int) -> str:
    """The i-th simulated node of a load run (the same name in every phase)."""
    return NODE_FORMAT.format(i)


def nodes_for(rate: float, interval_ms: int) -> int:
    """Nodes that, each reporting once per interval, offer `rate` messages per second."""
    return max(1, round(rate * interval_ms / 1000.0))


def parse_steps(text: str) -> list[int]:
    """"1000,5k,10k" → [1000, 5000, 10000]; rates must be positive."""
    steps: list[int] = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        scale = 1000 if part.endswith("k") else 1
        number = part[:-1] if part.endswith("k") else part
        try:
            value = float(number) * scale
        except ValueError:
            raise ValueError(f"--steps: {part!r} is not a rate (e.g. 1000,5000 or 1k,5k)") from None
        if value <= 0 or not math.isfinite(value):
            raise ValueError(f"--steps: rates must be > 0 (got {part!r})")
        steps.append(round(value))
    if not steps:
        raise ValueError("--steps: give at least one rate")
    return steps


def ramp_phases(
    steps: Sequence[int], hold_s: float, *, warmup_s: float, warmup_rate: float | None = None, interval_ms: int = 1000
) -> list[Phase]:
    """Warm-up (at the first step's rate unless given) then one phase per step."""
    if hold_s <= 0:
        raise ValueError("--hold must be > 0")
    phases: list[Phase] = []
    if warmup_s > 0:
        phases.append(Phase("warmup", float(warmup_rate or steps[0]), warmup_s, interval_ms))
    phases += [Phase(f"step-{rate}", float(rate), hold_s, interval_ms) for rate in steps]
    return phases


def settle_s(hold_s: float) -> float:
    """Time at the start of a step left out of its measurement (queues adapting to the new rate)."""
    return min(5.0, hold_s / 3.0)


def step_windows(phases: Sequence[Phase], starts: dict[str, float] | None = None) -> list[Window]:
    """Measurement windows of the `step-*` phases.

    `starts` are the phase start times the driver reported (seconds since t0); without
    them the nominal schedule is used.
    """
    windows: list[Window] = []
    t = 0.0
    index = 0
    for phase in phases:
        start = starts.get(phase.name, t) if starts else t
        if phase.name.startswith("step-"):
            windows.append(Window(index, phase.rate, start + settle_s(phase.seconds), start + phase.seconds))
            index += 1
        t = start + phase.seconds
    return windows


def plan_seconds(phases: Iterable[Phase]) -> float:
    return sum(p.seconds for p in phases)


# --- statistics ------------------------------------------------------------------------


def latency_summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "count": float(len(values)),
        "p50": percentile(list(values), 50),
        "p99": percentile(list(values), 99),
        "max": max(values) if values else float("nan"),
    }


def rate_between(samples: Sequence[tuple[float, float]], start_s: float, end_s: float) -> float | None:
    """Rate of a monotonic counter sampled as (t, value) between two times (interpolated)."""
    inside = [(t, v) for t, v in samples if start_s <= t <= end_s]
    if len(inside) < 2:
        return None
    (t0, v0), (t1, v1) = inside[0], inside[-1]
    if t1 - t0 <= 0:
        return None
    return (v1 - v0) / (t1 - t0)


def step_points(samples: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The samples at which a step-wise counter moved: for committed offsets, when each commit was seen."""
    points: list[tuple[float, float]] = []
    for (_, before), (t, v) in pairwise(samples):
        if v != before:
            points.append((t, v))
    return points


def _interpolate(points: Sequence[tuple[float, float]], t: float) -> float:
    for (t0, v0), (t1, v1) in pairwise(points):
        if t0 <= t <= t1:
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    raise ValueError(f"{t} is outside the points' span")


def step_rate_between(samples: Sequence[tuple[float, float]], start_s: float, end_s: float) -> float | None:
    """Rate of a counter that moves in steps (committed offsets) over a window, possibly shorter than a step.

    Between two seen steps the counter is taken to have grown linearly, which is exact for a stage
    consuming at a steady rate; the window is clipped to the span of the steps seen. With fewer than
    two steps (an idle stage, or a window before the second commit) this is ``rate_between``.
    """
    points = step_points(samples)
    if len(points) < 2:
        return rate_between(samples, start_s, end_s)
    lo, hi = max(start_s, points[0][0]), min(end_s, points[-1][0])
    if hi <= lo:
        return rate_between(samples, start_s, end_s)
    return (_interpolate(points, hi) - _interpolate(points, lo)) / (hi - lo)


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points (0 for fewer than two distinct x)."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def second_half_growth(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(slope per second, growth over the second half) of y over the second half of x's span."""
    if len(points) < 2:
        return 0.0, 0.0
    first, last = points[0][0], points[-1][0]
    mid = first + (last - first) / 2
    half = [(x, y) for x, y in points if x >= mid]
    s = slope(half)
    return s, s * (last - mid)


# --- thresholds ------------------------------------------------------------------------


@dataclass(frozen=True)
class Thresholds:
    max_p99_ms: float | None = None
    max_decision_p99_ms: float | None = None
    min_throughput_ratio: float | None = None
    max_lost: int | None = None
    max_rss_growth_mb: float | None = None
    max_dead_letters: int | None = None

    def any(self) -> bool:
        return any(v is not None for v in asdict(self).values())


@dataclass
class StepOutcome:
    """What one step measured (the inputs of the threshold checks)."""

    offered: float
    achieved: float | None = None
    stream_p99_ms: float | None = None
    decision_p99_ms: float | None = None
    dead_letters: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        if self.achieved is None or self.offered <= 0:
            return None
        return self.achieved / self.offered


def check_step(outcome: StepOutcome, th: Thresholds) -> list[str]:
    """Violations of one step; a metric that a threshold needs but was not measured is a violation."""
    out: list[str] = []
    where = f"step {outcome.offered:,.0f}/s"
    if th.max_p99_ms is not None:
        if outcome.stream_p99_ms is None or math.isnan(outcome.stream_p99_ms):
            out.append(f"{where}: no end-to-end latency measured (needs --max-p99-ms {th.max_p99_ms:g})")
        elif outcome.stream_p99_ms > th.max_p99_ms:
            out.append(f"{where}: p99 {outcome.stream_p99_ms:.1f} ms > {th.max_p99_ms:g} ms")
    if th.max_decision_p99_ms is not None:
        if outcome.decision_p99_ms is None or math.isnan(outcome.decision_p99_ms):
            out.append(f"{where}: no decision latency measured")
        elif outcome.decision_p99_ms > th.max_decision_p99_ms:
            out.append(f"{where}: decision p99 {outcome.decision_p99_ms:.1f} ms > {th.max_decision_p99_ms:g} ms")
    if th.min_throughput_ratio is not None:
        ratio = outcome.ratio
        if ratio is None:
            out.append(f"{where}: no throughput measured")
        elif ratio < th.min_throughput_ratio:
            out.append(
                f"{where}: achieved {outcome.achieved:,.0f}/s = {ratio:.2f} of offered < {th.min_throughput_ratio:g}"
            )
    if th.max_dead_letters is not None and outcome.dead_letters > th.max_dead_letters:
        out.append(f"{where}: {outcome.dead_letters} dead letters > {th.max_dead_letters}")
    return out


def check_soak(lost: int | None, rss_growth_mb: dict[str, float], dead_letters: int, th: Thresholds) -> list[str]:
    out: list[str] = []
    if th.max_lost is not None:
        if lost is None:
            out.append("soak: loss not measured (no features stage ran)")
        elif lost > th.max_lost:
            out.append(f"soak: {lost} lost messages > {th.max_lost}")
    if th.max_rss_growth_mb is not None:
        for name, growth in sorted(rss_growth_mb.items()):
            if growth > th.max_rss_growth_mb:
                out.append(f"soak: {name} RSS grew {growth:.1f} MB over the second half > {th.max_rss_growth_mb:g} MB")
    if th.max_dead_letters is not None and dead_letters > th.max_dead_letters:
        out.append(f"soak: {dead_letters} dead letters > {th.max_dead_letters}")
    return out


def max_sustained(outcomes: Sequence[StepOutcome], th: Thresholds) -> float | None:
    """The highest offered rate whose step passed every check (and every step below it)."""
    best: float | None = None
    for outcome in sorted(outcomes, key=lambda o: o.offered):
        if check_step(outcome, th):
            break
        best = outcome.offered
    return best
