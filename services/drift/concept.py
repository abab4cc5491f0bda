"""Concept drift of the failure model from delayed labels (pure): online AUCPR and Brier per horizon.

A risk.v2 task prediction made at ``t`` for horizon ``H`` *matures* once taskevents.v1 event time
has passed ``t + H + grace``; its label then follows ``training/labels.py`` exactly: the run's next
lifecycle event after ``t`` is in the card's failure set within ``(t, t + H]`` → 1; a terminal
event outside the set, or nothing within H → 0; a SUBMIT/SCHEDULE first (a lost terminal record)
→ censored. A prediction for a task that was not running at ``t`` (the risk stage's final
``0`` after a run stops, or a task still pending) is no prediction and is skipped.

Matured (probability, label) pairs fill a sliding window per horizon: the predictions of the last
``window`` of event time that could have matured by now (made before ``watermark − H − grace``);
AUCPR (average precision, as sklearn computes it) and Brier are compared with the card's held-out
figures after adjusting both for the window's base rate (a cluster failing more often is not a
worse model): ``aucpr_skill = (AUCPR − rate) / (1 − rate)`` and ``brier_skill = 1 − Brier /
(rate · (1 − rate))``. Drift at a horizon when either skill falls below the reference's by more
than its margin. State is per-task timelines (hashed into ``SLOTS`` slots) and minute buckets of
matured pairs, both serialisable for a changelog (``ConceptState`` in ``processor.py``).
"""

from __future__ import annotations

import heapq
import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

Status = Literal["drift", "no_drift", "insufficient_data"]
SUBMIT, SCHEDULE = 0, 1
TERMINAL = frozenset((2, 3, 4, 5, 6))
LIFECYCLE = frozenset((0, 1, 2, 3, 4, 5, 6))
EVENT_CODES = {"SUBMIT": 0, "SCHEDULE": 1, "EVICT": 2, "FAIL": 3, "FINISH": 4, "KILL": 5, "LOST": 6}
SLOTS = 1024
"""Task timelines are persisted in this many changelog keys (bounded key space, no tombstones)."""
BUCKET_MS = 60_000
MAX_PENDING_PER_TASK = 128


@dataclass(frozen=True)
class HorizonReference:
    horizon_s: int
    aucpr: float | None
    brier: float | None
    positive_rate: float | None

    def aucpr_skill(self) -> float | None:
        return aucpr_skill(self.aucpr, self.positive_rate)

    def brier_skill(self) -> float | None:
        return brier_skill(self.brier, self.positive_rate)


@dataclass(frozen=True)
class ConceptReference:
    version: str
    horizons: tuple[HorizonReference, ...]
    failure_types: frozenset[int]


def concept_reference(card: Mapping[str, Any], version: str) -> ConceptReference | str:
    """The card's held-out AUCPR / Brier / positive rate per horizon and its failure set, or why not."""
    label = card.get("label")
    metrics = (card.get("metrics") or {}).get("horizons")
    if not isinstance(label, dict) or not isinstance(metrics, dict):
        return f"{version}: model card has no label definition or per-horizon metrics (no concept-drift reference)"
    horizons: list[HorizonReference] = []
    for h in sorted(int(x) for x in label.get("horizons_s", [])):
        m = metrics.get(f"{h}s") or {}
        horizons.append(HorizonReference(
            horizon_s=h, aucpr=_num((m.get("model") or {}).get("aucpr")),
            brier=_num((m.get("calibration") or {}).get("brier")), positive_rate=_num(m.get("positive_rate"))))
    failure = frozenset(int(t) for t in label.get("failure_types", [3]))
    if not horizons:
        return f"{version}: model card names no horizons"
    return ConceptReference(version, tuple(horizons), failure)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def aucpr_skill(aucpr: float | None, rate: float | None) -> float | None:
    if aucpr is None or rate is None or not 0 < rate < 1:
        return None
    return (aucpr - rate) / (1 - rate)


def brier_skill(brier: float | None, rate: float | None) -> float | None:
    if brier is None or rate is None or not 0 < rate < 1:
        return None
    return 1 - brier / (rate * (1 - rate))


def average_precision(y: np.ndarray, p: np.ndarray) -> float | None:
    """sklearn's ``average_precision_score``: Σ (R_n − R_{n−1}) P_n over distinct thresholds (None: one class)."""
    y = np.asarray(y, dtype=np.int64)
    positives = int(y.sum())
    if positives == 0 or positives == len(y):
        return None
    order = np.argsort(-np.asarray(p, dtype=np.float64), kind="mergesort")
    ps, ys = np.asarray(p, dtype=np.float64)[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(ps) != 0), len(ps) - 1]  # last index of each distinct score
    tp = np.cumsum(ys)[last]
    precision = tp / (last + 1)
    recall = tp / positives
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def outcome(events: Sequence[tuple[int, int]], t_ms: int, horizon_ms: int, failure: frozenset[int]) -> int | None:
    """The label of a prediction at ``t_ms`` (events: the task's lifecycle events, time-sorted), None = no label."""
    before: tuple[int, int] | None = None
    after: tuple[int, int] | None = None
    for ev in events:
        if ev[0] <= t_ms:
            before = ev
        else:
            after = ev
            break
    if before is not None and before[1] != SCHEDULE:
        return None  # not running at t: a stopped run's final 0, or a pending task
    if after is None or after[0] > t_ms + horizon_ms:
        return 0
    if after[1] in failure:
        return 1
    if after[1] in TERMINAL:
        return 0
    return None  # SUBMIT / SCHEDULE first: the terminal record is missing (censored, as offline)


@dataclass
class Timeline:
    """One task: its lifecycle events and the predictions not yet matured at every horizon."""

    events: list[tuple[int, int]] = field(default_factory=list)
    pending: list[tuple[int, tuple[float, ...], int]] = field(default_factory=list)
    """(prediction time, probability per horizon, horizons already matured)."""
    last_sample_ms: int = -1

    def to_json(self) -> list[Any]:
        return [self.events, [[t, list(p), k] for t, p, k in self.pending], self.last_sample_ms]

    @staticmethod
    def of_json(raw: list[Any]) -> Timeline:
        return Timeline([(int(a), int(b)) for a, b in raw[0]],
                        [(int(t), tuple(float(x) for x in p), int(k)) for t, p, k in raw[1]], int(raw[2]))


@dataclass(frozen=True)
class ConceptConfig:
    window_ms: int = 6 * 3_600_000
    grace_ms: int = 60_000
    sample_gap_ms: int = 60_000
    min_labels: int = 500
    min_positives: int = 10
    aucpr_drop: float = 0.25
    brier_drop: float = 0.25
    max_tasks: int = 200_000
    max_labels: int = 300_000
    """Matured pairs kept at most (all horizons): beyond, the oldest minutes leave the window early."""


@dataclass(frozen=True)
class HorizonVerdict:
    horizon_s: int
    status: Status
    labels: int
    positives: int
    aucpr: float | None
    brier: float | None
    reference: HorizonReference
    reason: str


@dataclass(frozen=True)
class ConceptVerdict:
    status: Status
    horizons: list[HorizonVerdict]
    reasons: list[str]
    pending: int


def slot_of(task: str) -> int:
    return zlib.crc32(task.encode()) % SLOTS


class ConceptTracker:
    """Per-task timelines, maturing predictions and the windows of matured (p, y) per horizon."""

    def __init__(self, reference: ConceptReference, config: ConceptConfig) -> None:
        self.reference = reference
        self.config = config
        self.horizons_ms = [h.horizon_s * 1000 for h in reference.horizons]
        self.tasks: dict[str, Timeline] = {}
        self.slot_tasks: dict[int, set[str]] = {}
        self.buckets: dict[int, list[tuple[int, int, float, int]]] = {}
        """Bucket start → matured (horizon index, prediction time, probability, label)."""
        self.watermark_ms = 0
        self.due: list[tuple[int, str]] = []
        self.dirty_slots: set[int] = set()
        self.dirty_buckets: set[int] = set()
        self.dropped = 0
        self.forgot_ms = 0
        self.matured = 0

    # -- inputs -------------------------------------------------------------------------------
    def add_prediction(self, task: str, ts_ms: int, probs: Sequence[float]) -> bool:
        """A task's probabilities (one per reference horizon, in order); thinned to one per ``sample_gap``."""
        tl = self.tasks.get(task)
        if tl is None:
            if len(self.tasks) >= self.config.max_tasks:
                self.dropped += 1
                return False
            tl = self._new(task)
        if ts_ms <= tl.last_sample_ms or ts_ms - tl.last_sample_ms < self.config.sample_gap_ms \
                or len(tl.pending) >= MAX_PENDING_PER_TASK:
            return False  # also what makes a re-delivered record count once
        tl.last_sample_ms = ts_ms
        tl.pending.append((ts_ms, tuple(float(p) for p in probs), 0))
        heapq.heappush(self.due, (ts_ms + self.horizons_ms[0] + self.config.grace_ms, task))
        self.dirty_slots.add(slot_of(task))
        return True

    def add_event(self, task: str, ts_ms: int, code: int) -> None:
        """A lifecycle event of a task (other event types carry no outcome)."""
        self.watermark_ms = max(self.watermark_ms, ts_ms)
        if code not in LIFECYCLE:
            return
        tl = self.tasks.get(task)
        if tl is None:
            if len(self.tasks) >= self.config.max_tasks:
                self.dropped += 1
                return
            tl = self._new(task)
        ev = (ts_ms, code)
        if ev in tl.events:
            return  # re-delivered
        tl.events.append(ev)
        if len(tl.events) > 1 and tl.events[-2] > ev:
            tl.events.sort()
        self.dirty_slots.add(slot_of(task))

    def _new(self, task: str) -> Timeline:
        tl = self.tasks[task] = Timeline()
        self.slot_tasks.setdefault(slot_of(task), set()).add(task)
        return tl

    # -- maturing -----------------------------------------------------------------------------
    def mature(self) -> int:
        """Label every prediction whose horizon (plus grace) event time has passed; returns pairs added."""
        added = 0
        grace = self.config.grace_ms
        while self.due and self.due[0][0] <= self.watermark_ms:
            _, task = heapq.heappop(self.due)
            tl = self.tasks.get(task)
            if tl is None or not tl.pending:
                continue
            added += self._mature_task(task, tl)
            if tl.pending:
                t, _, k = tl.pending[0]
                heapq.heappush(self.due, (t + self.horizons_ms[k] + grace, task))
        self._forget_old()
        while self.matured > self.config.max_labels and len(self.buckets) > 1:
            oldest = min(self.buckets)
            self.matured -= len(self.buckets.pop(oldest))
            self.dirty_buckets.add(oldest)
        return added

    def _mature_task(self, task: str, tl: Timeline) -> int:
        added = 0
        keep: list[tuple[int, tuple[float, ...], int]] = []
        for t, probs, k in tl.pending:
            while k < len(self.horizons_ms) and t + self.horizons_ms[k] + self.config.grace_ms <= self.watermark_ms:
                y = outcome(tl.events, t, self.horizons_ms[k], self.reference.failure_types)
                if y is not None and k < len(probs):
                    bucket = t - t % BUCKET_MS
                    self.buckets.setdefault(bucket, []).append((k, t, probs[k], y))
                    self.dirty_buckets.add(bucket)
                    self.matured += 1
                    added += 1
                k += 1
            if k < len(self.horizons_ms):
                keep.append((t, probs, k))
        keep.sort(key=lambda e: e[0] + self.horizons_ms[e[2]])
        tl.pending = keep
        # events older than every pending prediction matter only as "the last one before"
        oldest = min((t for t, _, _ in keep), default=self.watermark_ms)
        before = [i for i, ev in enumerate(tl.events) if ev[0] <= oldest]
        if len(before) > 1:
            del tl.events[: before[-1]]
        self.dirty_slots.add(slot_of(task))
        return added

    def _forget_old(self) -> None:
        if self.watermark_ms - self.forgot_ms < BUCKET_MS:
            return  # a scan of every task: once a minute of event time is enough
        self.forgot_ms = self.watermark_ms
        horizon = self.watermark_ms - self.horizons_ms[-1] - self.config.grace_ms - self.config.window_ms
        for bucket in [b for b in self.buckets if b + BUCKET_MS <= horizon]:
            self.matured -= len(self.buckets.pop(bucket))
            self.dirty_buckets.add(bucket)
        # a task with nothing pending whose last event is older than the longest horizon: no
        # prediction can need it (an unknown past reads as "running", which a SCHEDULE said anyway)
        stale = self.watermark_ms - self.horizons_ms[-1] - self.config.grace_ms
        for task in [k for k, tl in self.tasks.items()
                     if not tl.pending and (not tl.events or tl.events[-1][0] < stale) and tl.last_sample_ms < stale]:
            del self.tasks[task]
            self.slot_tasks.get(slot_of(task), set()).discard(task)
            self.dirty_slots.add(slot_of(task))

    # -- verdict ------------------------------------------------------------------------------
    def pairs(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Horizon ``k``'s matured pairs of the last ``window`` of predictions that could mature by now."""
        horizon = self.watermark_ms - self.horizons_ms[k] - self.config.grace_ms - self.config.window_ms
        rows = [(p, y) for b in self.buckets.values() for (i, t, p, y) in b if i == k and t > horizon]
        if not rows:
            return np.zeros(0), np.zeros(0, dtype=np.int64)
        arr = np.asarray(rows, dtype=np.float64)
        return arr[:, 0], arr[:, 1].astype(np.int64)

    def evaluate(self) -> ConceptVerdict:
        cfg = self.config
        out: list[HorizonVerdict] = []
        for k, ref in enumerate(self.reference.horizons):
            p, y = self.pairs(k)
            n, pos = len(y), int(y.sum())
            brier = float(np.mean((p - y) ** 2)) if n else None
            aucpr = average_precision(y, p) if n else None
            status: Status
            if n < cfg.min_labels or pos < cfg.min_positives or n - pos < cfg.min_positives:
                status, reason = "insufficient_data", (f"{ref.horizon_s}s: {n} matured labels, {pos} failures "
                                                       f"(a claim needs {cfg.min_labels} and {cfg.min_positives})")
            else:
                status, reason = _judge(ref, n, pos, aucpr, brier, cfg)
            out.append(HorizonVerdict(ref.horizon_s, status, n, pos, aucpr, brier, ref, reason))
        statuses = {v.status for v in out}
        overall: Status = "drift" if "drift" in statuses else "no_drift" if "no_drift" in statuses \
            else "insufficient_data"
        reasons = [v.reason for v in out if v.status == "drift"] or [v.reason for v in out]
        pending = sum(len(tl.pending) for tl in self.tasks.values())
        return ConceptVerdict(overall, out, reasons, pending)

    # -- persistence (changelog values) -------------------------------------------------------
    def slot_value(self, slot: int) -> dict[str, Any]:
        return {t: self.tasks[t].to_json() for t in sorted(self.slot_tasks.get(slot, ())) if t in self.tasks}

    def bucket_value(self, bucket: int) -> dict[str, Any]:
        return {"b": bucket, "r": [list(r) for r in self.buckets.get(bucket, [])]}

    def restore(self, slots: Iterable[Mapping[str, Any]], buckets: Iterable[Mapping[str, Any]],
                watermark_ms: int) -> None:
        self.watermark_ms = max(self.watermark_ms, watermark_ms)
        for value in slots:
            for task, raw in value.items():
                tl = self.tasks[task] = Timeline.of_json(raw)
                self.slot_tasks.setdefault(slot_of(task), set()).add(task)
                if tl.pending:
                    t, _, k = tl.pending[0]
                    heapq.heappush(self.due, (t + self.horizons_ms[min(k, len(self.horizons_ms) - 1)]
                                              + self.config.grace_ms, task))
        for value in buckets:
            rows = [(int(k), int(t), float(p), int(y)) for k, t, p, y in value.get("r", [])]
            if rows:
                self.buckets[int(value["b"])] = rows
                self.matured += len(rows)


def _judge(ref: HorizonReference, n: int, pos: int, aucpr: float | None, brier: float | None,
           cfg: ConceptConfig) -> tuple[Status, str]:
    rate = pos / n
    live_a, live_b = aucpr_skill(aucpr, rate), brier_skill(brier, rate)
    ref_a, ref_b = ref.aucpr_skill(), ref.brier_skill()
    why: list[str] = []
    if live_a is not None and ref_a is not None and live_a < ref_a - cfg.aucpr_drop:
        why.append(f"AUCPR skill {live_a:.3f} < reference {ref_a:.3f} - {cfg.aucpr_drop}")
    if live_b is not None and ref_b is not None and live_b < ref_b - cfg.brier_drop:
        why.append(f"Brier skill {live_b:.3f} < reference {ref_b:.3f} - {cfg.brier_drop}")
    figures = (f"{ref.horizon_s}s: AUCPR {_f(aucpr)} (reference {_f(ref.aucpr)}), Brier {_f(brier)} (reference "
               f"{_f(ref.brier)}), failure rate {rate:.4f} (reference {_f(ref.positive_rate)}), {n} labels")
    if why:
        return "drift", f"concept: {figures}; " + "; ".join(why)
    return "no_drift", f"concept: {figures}"


def _f(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4f}"
