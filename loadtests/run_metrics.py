"""From what a run sampled to result rows: per-window throughput, latency, lag, dead letters, CPU/RSS.

Row vocabulary (``bench`` is always ``pipeline``; ``case`` says what was measured):

=====================  ==============  ========================================================
case                   metric          meaning
=====================  ==============  ========================================================
<mode>:load            sent            NodeState/s the driver actually produced (acknowledged)
<mode>:pipeline        throughput      NodeState/s consumed by the first stage (features), or
                                       the acknowledged produce rate when no stage runs
<mode>:stage:<svc>     throughput      the stage's consumption rate (msg/s over all its input topics,
                                       from its commits, interpolated between them)
<mode>:stage:<svc>     lag_max         largest backlog of the stage's group (messages, committed)
<mode>:stage:<svc>     capacity        consumption rate while its backlog (read after commits) grew
<mode>:e2e:<topic>     latency_p50/99  output produce time − input_ts_ms (ms), per output topic
<mode>:e2e:<topic>     throughput      outputs/s on that topic
<mode>:e2e             latency_p50/99  over the terminal stream outputs (regimes/anomalies/risk;
                                       features.v1 when none of them runs)
<mode>:deadletter      dead_letters    dead letters produced in the window
<mode>:proc:<name>     cpu / rss_max   mean CPU % (100 = one core) / largest RSS (MB)
=====================  ==============  ========================================================
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from contracts.topics import Topic
from loadtests.bench_format import Result, percentile
from loadtests.harness import Harness, RunData
from loadtests.load_plan import StepOutcome, Window, rate_between, step_points, step_rate_between
from loadtests.observe import DECISION_OUTPUTS, STREAM_OUTPUTS, TERMINAL_OUTPUTS, LagSample

BENCH = "pipeline"


def stage_groups(prefix: str, services: Sequence[str], known: set[str]) -> dict[str, str]:
    """Service → its consumer group (stream processors: ``<prefix>borg-<svc>``; others: ``<prefix><svc>``)."""
    out: dict[str, str] = {}
    for svc in services:
        for candidate in (f"{prefix}borg-{svc}", f"{prefix}{svc}"):
            if candidate in known:
                out[svc] = candidate
                break
    return out


def group_lag_series(samples: Sequence[LagSample], group: str) -> list[tuple[float, int]]:
    """(t, total lag over the group's topics) per sampling round."""
    totals: dict[float, int] = defaultdict(int)
    for s in samples:
        if s.group == group:
            totals[s.t] += s.lag
    return sorted(totals.items())


def committed_series(samples: Sequence[LagSample], group: str) -> list[tuple[float, float]]:
    """(t, committed offsets summed over every topic the group consumes) per sampling round."""
    totals: dict[float, int] = defaultdict(int)
    for s in samples:
        if s.group == group:
            totals[s.t] += s.committed
    return [(t, float(v)) for t, v in sorted(totals.items())]


def end_series(samples: Sequence[LagSample], group: str) -> list[tuple[float, float]]:
    """(t, end offsets summed over the group's topics): what was produced into its inputs."""
    totals: dict[float, int] = defaultdict(int)
    for s in samples:
        if s.group == group:
            totals[s.t] += s.end
    return [(t, float(v)) for t, v in sorted(totals.items())]


def saturated(backlog_growth: float, produced: float) -> bool:
    """A stage whose backlog grew by over a tenth of what arrived (and 100+ messages) did not keep up."""
    return backlog_growth > max(0.1 * produced, 100.0)


def backlog_growth(lags: Sequence[tuple[float, int]], committed: Sequence[tuple[float, float]],
                   start_s: float, end_s: float) -> tuple[float, float] | None:
    """(growth of the backlog, over how many seconds) around a window, read just after commits.

    Between commits the committed lag saw-tooths by up to one commit interval of input (5 s for
    features), which would look like growth in a short window; right after each commit it is the
    real backlog. With fewer than two commits inside the window, the nearest commit on each side
    is used; a group that committed nothing in the run is read at the window's first and last sample.
    """
    commit_times = [t for t, _ in step_points(committed)]
    lag_at = dict(lags)
    seen = [t for t in commit_times if t in lag_at]
    chosen = [t for t in seen if start_s <= t <= end_s]
    if len(chosen) < 2:
        before = [t for t in seen if t < start_s][-1:]
        after = [t for t in seen if t > end_s][:1]
        chosen = before + chosen + after
    if len(chosen) < 2:
        if commit_times:
            return None
        chosen = [t for t, _ in lags if start_s <= t <= end_s]
        if len(chosen) < 2:
            return None
    first, last = chosen[0], chosen[-1]
    return float(lag_at[last] - lag_at[first]), last - first


def _finite(value: float | None) -> bool:
    return value is not None and not math.isnan(value)


class WindowMetrics:
    """Rows and the threshold inputs of one measurement window."""

    def __init__(self, harness: Harness, data: RunData, services: Sequence[str], mode: str) -> None:
        self.h = harness
        self.data = data
        self.mode = mode
        self.services = list(services)
        self.groups = stage_groups(data.prefix, services, harness.lag.known_groups)

    def measure(self, w: Window) -> tuple[list[Result], StepOutcome]:
        rows: list[Result] = []
        mode, offered = self.mode, w.offered

        def add(case: str, metric: str, value: float | None, unit: str) -> None:
            if _finite(value):
                rows.append(Result(BENCH, f"{mode}:{case}", metric, round(float(value), 3), unit, offered=offered))  # type: ignore[arg-type]

        sent = rate_between(self.data.progress, w.start_s, w.end_s)
        add("load", "sent", sent, "msg/s")
        achieved: float | None = sent
        for svc, group in self.groups.items():
            committed = committed_series(self.h.lag.samples, group)
            rate = step_rate_between(committed, w.start_s, w.end_s)
            add(f"stage:{svc}", "throughput", rate, "msg/s")
            lag_series = group_lag_series(self.h.lag.samples, group)
            lags = [lag for t, lag in lag_series if w.start_s <= t <= w.end_s]
            if lags:
                add(f"stage:{svc}", "lag_max", max(lags), "messages")
                produced = rate_between(end_series(self.h.lag.samples, group), w.start_s, w.end_s)
                growth = backlog_growth(lag_series, committed, w.start_s, w.end_s)
                if rate is not None and produced and growth and saturated(growth[0], produced * growth[1]):
                    add(f"stage:{svc}", "capacity", rate, "msg/s")
            if svc == "features":
                achieved = rate
        add("pipeline", "throughput", achieved, "msg/s")
        stream_p: dict[str, tuple[float, float]] = {}
        for topic in (*STREAM_OUTPUTS, *DECISION_OUTPUTS):
            series = self.h.observer.series.get(topic)
            if series is None:
                continue
            lat = series.latencies_between(w.start_s, w.end_s)
            n_out = series.count_between(math.floor(w.start_s), math.floor(w.end_s))
            add(f"e2e:{topic}", "throughput", n_out / w.seconds if w.seconds else None, "msg/s")
            if lat:
                p50, p99 = percentile(lat, 50), percentile(lat, 99)
                add(f"e2e:{topic}", "latency_p50", p50, "ms")
                add(f"e2e:{topic}", "latency_p99", p99, "ms")
                stream_p[topic] = (p50, p99)
        terminal = [t for t in TERMINAL_OUTPUTS if t in stream_p] or [t for t in (Topic.FEATURES,) if t in stream_p]
        e2e: list[float] = []
        for topic in terminal:
            e2e += self.h.observer.series[topic].latencies_between(w.start_s, w.end_s)
        stream_p99 = percentile(e2e, 99) if e2e else None
        if e2e:
            add("e2e", "latency_p50", percentile(e2e, 50), "ms")
            add("e2e", "latency_p99", stream_p99, "ms")
        dead = self.h.observer.dead_letter_count(w.start_s, w.end_s)
        add("deadletter", "dead_letters", float(dead), "messages")
        for name in self.h.procs.names():
            points = [s for s in self.h.procs.series(name) if w.start_s <= s.t <= w.end_s]
            if points:
                add(f"proc:{name}", "cpu", sum(p.cpu_pct for p in points) / len(points), "%")
                add(f"proc:{name}", "rss_max", max(p.rss_mb for p in points), "MB")
        outcome = StepOutcome(
            offered=offered,
            achieved=achieved,
            stream_p99_ms=stream_p99,
            decision_p99_ms=stream_p[Topic.DECISIONS][1] if Topic.DECISIONS in stream_p else None,
            dead_letters=dead,
        )
        return rows, outcome
