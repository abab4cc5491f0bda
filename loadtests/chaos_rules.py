"""Pure rules of the chaos scenario: when a stage has recovered, which fault a loss belongs to, duplicates.

* **Recovery** of a consumer group after a fault at ``t0``: the first lag sample after
  ``t0`` where the group's committed offsets (summed over its input topics) are past
  where they were at ``t0`` — or nothing new arrived to commit — and its lag is back
  under a bound. The bound is relative to the group's own steady state: twice the largest
  lag sampled in the ``BASELINE_S`` before the fault, capped at ``CAP_S`` seconds of the
  group's input rate, and never below ``floor`` (stages commit every few seconds, so a
  healthy lag saw-tooths up to one commit interval).
* **Attribution**: a lost message (or an action applied twice) at time ``x`` counts
  against the last fault injected at or before ``x + LOOKBACK_S``: messages produced
  shortly before a fault are the ones in flight when it hits. Before the first fault it
  counts against ``baseline``.
* **Duplicate action**: a decision id with more than one ``applied`` ActionResult
  (``duplicate`` is the referee recognising a replay on the object, which is correct).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from loadtests.accounting import Tick, dedupe_windows
from loadtests.load_plan import node_name
from loadtests.observe import FeatureWindow, LagSample

BASELINE_S = 15.0
CAP_S = 15.0
LOOKBACK_S = 20.0
BASELINE_CASE = "baseline"


@dataclass(frozen=True)
class GroupPoint:
    t: float
    committed: int
    end: int

    @property
    def lag(self) -> int:
        return max(0, self.end - self.committed)


def group_series(samples: Iterable[LagSample], group: str) -> list[GroupPoint]:
    """One point per sampling round of a group: committed and end offsets summed over its topics."""
    acc: dict[float, list[int]] = defaultdict(lambda: [0, 0])
    for s in samples:
        if s.group == group:
            acc[s.t][0] += s.committed
            acc[s.t][1] += s.end
    return [GroupPoint(t, c, e) for t, (c, e) in sorted(acc.items())]


def lag_bound(series: Sequence[GroupPoint], t0: float, floor: float, cap_s: float = CAP_S) -> float:
    """What counts as caught up again: twice the worst lag of the steady state before t0, but never
    more than ``cap_s`` seconds of the group's input rate (a stage already falling behind before
    the fault has no steady state to return to), and at least ``floor``."""
    before = [p for p in series if t0 - BASELINE_S <= p.t < t0]
    worst = max((p.lag for p in before), default=0)
    rate = (before[-1].end - before[0].end) / (before[-1].t - before[0].t) if len(before) > 1 else 0.0
    return max(floor, min(2.0 * worst, cap_s * rate))


def recovered_at(
    series: Sequence[GroupPoint], t0: float, bound: float, *, not_before: float | None = None
) -> float | None:
    """First sample time after t0 (and not_before) at which the group progressed past t0 and caught up."""
    at_fault = [p for p in series if p.t <= t0]
    c0 = at_fault[-1].committed if at_fault else (series[0].committed if series else 0)
    start = t0 if not_before is None else max(t0, not_before)
    for p in series:
        if p.t <= start:
            continue
        progressed = p.committed > c0 or p.end <= c0
        if progressed and p.lag <= bound:
            return p.t
    return None


def attribute(times: Iterable[tuple[float, int]], faults: Sequence[tuple[str, float]],
              lookback_s: float = LOOKBACK_S) -> Counter[str]:
    """(time, count) events → counts per fault name (the last fault at or before time + lookback)."""
    ordered = sorted(faults, key=lambda f: f[1])
    starts = [t for _, t in ordered]
    out: Counter[str] = Counter()
    for t, n in times:
        i = bisect_right(starts, t + lookback_s) - 1
        out[ordered[i][0] if i >= 0 else BASELINE_CASE] += n
    return out


def loss_times(ticks: Sequence[Tick], windows: Iterable[FeatureWindow],
               dead: Iterable[tuple[str, int]]) -> list[tuple[float, int]]:
    """When each loss of :func:`loadtests.accounting.account` happened (seconds): a short window at
    its end, an uncovered sample at its timestamp. Same rule, same total as ``account(...).lost``."""
    dead_set = set(dead)
    by_node = dedupe_windows(windows)
    out: list[tuple[float, int]] = []
    for i in range(max((t.nodes for t in ticks), default=0)):
        node = node_name(i)
        stamps = sorted((t.ts_ms, t.flush) for t in ticks if i < t.nodes and (node, t.seq) not in dead_set)
        ts_list = [ts for ts, _ in stamps]
        covered = [False] * len(stamps)
        for w in by_node.get(node, ()):
            lo = bisect_left(ts_list, w.end_ms - w.window_s * 1000)
            hi = bisect_left(ts_list, w.end_ms)
            for j in range(lo, hi):
                covered[j] = True
            if w.samples < hi - lo:
                out.append((w.end_ms / 1000.0, hi - lo - w.samples))
        out += [(ts / 1000.0, 1) for (ts, flush), c in zip(stamps, covered, strict=True) if not c and not flush]
    return out


def missing_windows(windows: Iterable[FeatureWindow], outputs: set[tuple[str, int]],
                    dead: set[tuple[str, int]]) -> list[tuple[float, int]]:
    """Per-window stage (regime, anomaly): FeatureVectors neither answered nor dead-lettered, at their end."""
    expected = {(w.node, w.end_ms) for w in windows}
    return [(end / 1000.0, 1) for _, end in sorted(expected - outputs - dead)]


@dataclass(frozen=True)
class Applied:
    t: float
    decision_id: str
    outcome: str


def duplicate_actions(results: Iterable[Applied]) -> list[tuple[str, float, int]]:
    """Decisions applied more than once: (decision id, time of the second application, applications)."""
    times: dict[str, list[float]] = defaultdict(list)
    for r in results:
        if r.outcome == "applied":
            times[r.decision_id].append(r.t)
    return [(d, sorted(ts)[1], len(ts)) for d, ts in sorted(times.items()) if len(ts) > 1]
