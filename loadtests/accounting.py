"""Soak loss accounting: every produced NodeState (node, seq) is in a FeatureVector window or a dead letter.

The rule (FeatureVector carries a count, not the seqs it covers):

* The driver logs every tick (seq, ts_ms, nodes): tick k produced ``(sim-i, k)`` at
  ``ts_ms_k`` for every i < nodes_k (uniform keys only). Ticks of the ``flush`` phase are
  sent after the soak only to close the last open window of every node.
* A FeatureVector ``(node, ts_ms=end, window_s=W, samples=n)`` covers the node's samples
  with ``end − W·1000 ≤ ts < end`` (the features service's panes are tumbling, one window
  per pane, boundaries offset per node; the window itself says where it ends).
  Re-emissions of the same (node, end) are one window (the largest count is kept).
* Dead letters whose original value still parses to (node, seq) remove that sample from
  what a window must hold. Dead letters that cannot be attributed are reported apart.
* Per window: ``expected`` = produced, not dead-lettered samples in its span. If it reports
  fewer, the difference is **lost** (dropped, or rejected as late); more is **unexpected**
  (double counting — never seen from a correct stage).
* A produced, not dead-lettered, non-flush sample in no emitted window is **lost**
  (``uncovered``). Flush samples in windows that never closed are not counted.

Lost = Σ per-window shortfall + uncovered samples.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from loadtests.load_plan import node_name
from loadtests.observe import FeatureWindow

FLUSH_PHASE = "flush"


@dataclass(frozen=True)
class Tick:
    seq: int
    ts_ms: int
    nodes: int
    phase: str = ""

    @property
    def flush(self) -> bool:
        return self.phase == FLUSH_PHASE


@dataclass
class Accounting:
    produced: int = 0
    flush_samples: int = 0
    dead_lettered: int = 0
    windows: int = 0
    covered: int = 0
    short: int = 0
    uncovered: int = 0
    unexpected: int = 0
    lost_by_node: dict[str, int] = field(default_factory=dict)

    @property
    def lost(self) -> int:
        return self.short + self.uncovered

    def summary(self) -> dict[str, int]:
        return {
            "produced": self.produced,
            "flush_samples": self.flush_samples,
            "dead_lettered": self.dead_lettered,
            "windows": self.windows,
            "covered": self.covered,
            "lost": self.lost,
            "lost_short_windows": self.short,
            "lost_uncovered": self.uncovered,
            "unexpected": self.unexpected,
            "nodes_with_loss": len(self.lost_by_node),
        }


def dedupe_windows(windows: Iterable[FeatureWindow]) -> dict[str, list[FeatureWindow]]:
    """Per node, one window per end (largest count), sorted by end."""
    best: dict[tuple[str, int], FeatureWindow] = {}
    for w in windows:
        key = (w.node, w.end_ms)
        if key not in best or w.samples > best[key].samples:
            best[key] = w
    out: dict[str, list[FeatureWindow]] = defaultdict(list)
    for w in sorted(best.values(), key=lambda w: (w.node, w.end_ms)):
        out[w.node].append(w)
    return out


def account(
    ticks: Sequence[Tick], windows: Iterable[FeatureWindow], dead: Iterable[tuple[str, int]]
) -> Accounting:
    """Apply the rule in the module docstring."""
    result = Accounting()
    dead_set = set(dead)
    by_node = dedupe_windows(windows)
    result.windows = sum(len(ws) for ws in by_node.values())
    max_nodes = max((t.nodes for t in ticks), default=0)
    for i in range(max_nodes):
        node = node_name(i)
        stamps: list[tuple[int, bool]] = []  # (ts, is_flush) of live samples, in tick order
        for tick in ticks:
            if i >= tick.nodes:
                continue
            if tick.flush:
                result.flush_samples += 1
            else:
                result.produced += 1
            if (node, tick.seq) in dead_set:
                result.dead_lettered += 1
                continue
            stamps.append((tick.ts_ms, tick.flush))
        stamps.sort()
        ts_list = [ts for ts, _ in stamps]
        in_window = [False] * len(stamps)
        node_lost = 0
        for w in by_node.get(node, ()):
            lo = bisect_left(ts_list, w.end_ms - w.window_s * 1000)
            hi = bisect_left(ts_list, w.end_ms)
            expected = hi - lo
            for j in range(lo, hi):
                in_window[j] = True
            if w.samples < expected:
                node_lost += expected - w.samples
                result.short += expected - w.samples
                result.covered += w.samples
            else:
                result.covered += expected
                result.unexpected += w.samples - expected
        for (_, flush), covered in zip(stamps, in_window, strict=True):
            if not covered and not flush:
                result.uncovered += 1
                node_lost += 1
        if node_lost:
            result.lost_by_node[node] = node_lost
    return result


def read_ticks(lines: Iterable[bytes]) -> list[Tick]:
    import orjson

    out = []
    for line in lines:
        if line.strip():
            raw = orjson.loads(line)
            out.append(Tick(int(raw["seq"]), int(raw["ts_ms"]), int(raw["nodes"]), str(raw.get("phase", ""))))
    return out


@dataclass(frozen=True)
class StageAccounting:
    """One per-window stage (regime, anomaly, node risk): every FeatureVector answered or dead-lettered."""

    stage: str
    expected: int
    answered: int
    dead_lettered: int
    missing: int
    unexpected: int


def account_stage(
    stage: str, windows: Iterable[FeatureWindow], outputs: set[tuple[str, int]], dead: set[tuple[str, int]]
) -> StageAccounting:
    """A stage that answers each FeatureVector (node, end) once: missing = windows with neither answer nor letter."""
    expected = {(w.node, w.end_ms) for w in windows}
    answered = expected & outputs
    lettered = (expected - answered) & dead
    return StageAccounting(
        stage=stage,
        expected=len(expected),
        answered=len(answered),
        dead_lettered=len(lettered),
        missing=len(expected - answered - lettered),
        unexpected=len(outputs - expected),
    )
