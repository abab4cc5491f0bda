"""A node's regime read from its pods against their own jobs: the input rows of the pod-relative regime model.

Pure (numpy, no clock: time is the samples' own). Training (``training.regime.pod_model``), ``borgctl eval regime
--basis pods`` and a serving stage compute the rows with this one class, so what is measured is what would be served.

A pod's IPC, cache-miss ratio, misses per kilo-instruction and branch-miss ratio agree with its job's other pods
(a Deployment's replicas run the same code) unless something disturbs it — the reference Google's CPI² compares a
task with (Zhang et al., EuroSys 2013). :class:`JobReference` keeps, per job, those ratios of the job's pods over
the last ``history_ms`` and answers the job's *undisturbed* value (the 0.9 quantile of IPC, the 0.1 quantile of the
others) once ``min_pods`` distinct pods were seen. A pod's deviation is sign × log(value / reference): it rises when
the pod is disturbed, in a pattern set by its class's sensitivities, not by its kind — which is why this reaches
workload kinds the classifier never trained on where the node's own counters do not (training/README.md).

Per closed node window (:class:`PodRegimeWindows`, the node's 10 s panes of ``featurelib.node``) the row is:

* ``VICTIM_COLUMNS``: pods judged (those present in the pane's newest sample), pods with a reference, the largest
  deviation and the summed rises per ratio, and how sensitive the most-disturbed pods are (cache-miss ratio and
  cache references per kilo-instruction of the pod whose miss ratio rose most, IPC of the pod whose branch misses
  rose most);
* the node's own feature vector (``featurelib.node.schema``, NaN where invalid);
* both again for the node's previous window (``prev_`` columns; NaN when there was none within ``LAG_MAX_MS``).

``span_windows`` > 1 reads each pod over its last ``span_windows`` windows instead of the closing one alone (its
counts summed over the consecutive windows it was read in): a pod's per-window count noise averages away, at the
price of a lag of up to ``span_windows`` windows after its co-runners change. The span is part of the rows'
meaning (``pod_regime_schema_hash``), so a model carries the span it was trained with in its card.
"""

from __future__ import annotations

import hashlib
import warnings
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from featurelib.node.samples import sample_from_dict
from featurelib.node.schema import HOP_MS, NODE_FEATURE_NAMES, as_model_input, node_feature_schema_hash
from featurelib.node.windows import DictStore, NodeWindows
from featurelib.pod import EXTENDED_EVENTS, EXTENDED_FEATURES, add_counts, pod_features, pod_uid_of

RATIOS: Final = (("ipc", 0.9, -1.0), ("miss_ratio", 0.1, 1.0), ("miss_pki", 0.1, 1.0), ("branch_miss_ratio", 0.1, 1.0))
"""(pod feature, reference quantile over the job's pods, sign): sign × log(value / reference) rises when the pod is
disturbed (IPC falls, the others rise)."""
_POD_INDEX: Final = {name: i for i, name in enumerate(EXTENDED_FEATURES)}
ROW_FEATURES: Final = ("ipc", "miss_ratio", "miss_pki", "branch_miss_ratio", "ref_pki")
"""What a pod contributes: the four ratios and its cache references per kilo-instruction (its sensitivity)."""
_ROW: Final = {name: i for i, name in enumerate(ROW_FEATURES)}
HISTORY_MS: Final = 60_000
MIN_REFERENCE_PODS: Final = 3
LAG_MAX_MS: Final = 2 * HOP_MS
VICTIM_COLUMNS: Final = (
    "pods", "pods_referenced",
    *(f"max_dev_{name}" for name, _, _ in RATIOS),
    *(f"sum_rise_{name}" for name, _, _ in RATIOS),
    "victim_miss_ratio", "victim_ref_pki", "victim_ipc",
)
_CURRENT: Final = (*VICTIM_COLUMNS, *NODE_FEATURE_NAMES)
COLUMNS: Final = (*_CURRENT, *(f"prev_{name}" for name in _CURRENT))
"""The model's input columns, in order."""
N_COLUMNS: Final = len(COLUMNS)
POD_REGIME_SCHEMA_VERSION: Final = 1
SPAN_WINDOWS_MAX: Final = 12
"""Longest span a pod is read over (two minutes of 10 s windows): bounds the per-pod history kept."""
JobOf = Callable[[str], str | None]
"""pod UID → its job (None: unknown — the pod is judged without a reference and adds to none)."""


def check_span_windows(span_windows: int) -> int:
    if not 1 <= span_windows <= SPAN_WINDOWS_MAX:
        raise ValueError(f"span_windows must be 1..{SPAN_WINDOWS_MAX}, got {span_windows}")
    return span_windows


def pod_regime_schema_hash(span_windows: int = 1) -> str:
    """Changes whenever the rows change meaning (columns, reference rule, lag, a pod's span): a model trained on
    other rows is refused. Span 1 keeps the hash it had before spans existed, so those models still load."""
    parts: tuple[Any, ...] = (POD_REGIME_SCHEMA_VERSION, node_feature_schema_hash(), COLUMNS, RATIOS, ROW_FEATURES,
                              HISTORY_MS, MIN_REFERENCE_PODS, LAG_MAX_MS)
    if check_span_windows(span_windows) != 1:
        parts = (*parts, ("span_windows", span_windows))
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def pod_row(counts: Mapping[str, float], covered_s: float) -> np.ndarray:
    """A pod's ``ROW_FEATURES`` from its counts summed over ``covered_s`` seconds."""
    features = pod_features(counts, covered_s, extended=True)
    return np.array([features[_POD_INDEX[name]] for name in ROW_FEATURES], dtype=np.float64)


class JobReference:
    """Each job's undisturbed ratios from its pods' windows in the last ``history_ms`` (bounded: ``max_jobs``
    jobs, ``max_rows`` windows per job; the oldest go first)."""

    def __init__(self, history_ms: int = HISTORY_MS, min_pods: int = MIN_REFERENCE_PODS, *, max_jobs: int = 100_000,
                 max_rows: int = 4096) -> None:
        if history_ms < 1 or min_pods < 1:
            raise ValueError("history_ms and min_pods must be >= 1")
        self.history_ms = history_ms
        self.min_pods = min_pods
        self.max_jobs = max_jobs
        self.max_rows = max_rows
        self._rows: OrderedDict[str, deque[tuple[int, str, np.ndarray]]] = OrderedDict()
        self._cache: dict[str, tuple[int, np.ndarray | None]] = {}

    def add(self, ts_ms: int, job: str, pod: str, row: np.ndarray) -> None:
        rows = self._rows.pop(job, None)
        if rows is None:
            rows = deque(maxlen=self.max_rows)
        self._rows[job] = rows  # most recently added last
        rows.append((ts_ms, pod, row))
        self._cache.pop(job, None)
        while len(self._rows) > self.max_jobs:
            gone, _ = self._rows.popitem(last=False)
            self._cache.pop(gone, None)

    def reference(self, job: str, now_ms: int) -> np.ndarray | None:
        """The job's reference per ``RATIOS`` at ``now_ms`` (None: fewer than ``min_pods`` distinct pods)."""
        cached = self._cache.get(job)
        if cached is not None and cached[0] == now_ms:
            return cached[1]
        rows = self._rows.get(job)
        answer = None
        if rows is not None:
            while rows and rows[0][0] <= now_ms - self.history_ms:
                rows.popleft()
            recent = [row for ts, _, row in rows if ts <= now_ms]
            if len({pod for ts, pod, _ in rows if ts <= now_ms}) >= self.min_pods:
                a = np.asarray(recent)
                with warnings.catch_warnings():  # a ratio no pod could give (all NaN) stays NaN: no deviation
                    warnings.simplefilter("ignore", RuntimeWarning)
                    answer = np.array([np.nanquantile(a[:, _ROW[name]], q) for name, q, _ in RATIOS])
            self._cache[job] = (now_ms, answer)
        return answer


def deviations(rows: np.ndarray, references: Sequence[np.ndarray | None]) -> np.ndarray:
    """Per pod (rows) and ratio: sign × log(value / its job's reference); NaN without a reference or a value."""
    out = np.full((len(references), len(RATIOS)), np.nan)
    for k, ref in enumerate(references):
        if ref is None:
            continue
        for r, (name, _, sign) in enumerate(RATIOS):
            value = rows[k, _ROW[name]]
            if value > 0 and ref[r] > 0:
                out[k, r] = sign * np.log(value / ref[r])
    return out


def _most(dev: np.ndarray, column: int) -> int | None:
    values = dev[:, column]
    return int(np.nanargmax(values)) if np.isfinite(values).any() else None


def victim_columns(rows: np.ndarray, dev: np.ndarray) -> np.ndarray:
    """The ``VICTIM_COLUMNS`` of one node window (``rows``: its pods' ``ROW_FEATURES``; ``dev``: ``deviations``)."""
    finite = np.isfinite(dev)
    if len(dev):
        largest = np.where(finite.any(axis=0), np.max(np.where(finite, dev, -np.inf), axis=0), np.nan)
        rises = np.nansum(np.clip(dev, 0.0, None), axis=0)
    else:
        largest, rises = np.full(len(RATIOS), np.nan), np.zeros(len(RATIOS))
    most_miss, most_branch = _most(dev, 1), _most(dev, 3)
    sensitivity = [rows[most_miss, _ROW["miss_ratio"]] if most_miss is not None else np.nan,
                   rows[most_miss, _ROW["ref_pki"]] if most_miss is not None else np.nan,
                   rows[most_branch, _ROW["ipc"]] if most_branch is not None else np.nan]
    counts = [float(len(rows)), float(finite[:, 0].sum()) if len(dev) else 0.0]
    return np.concatenate([counts, largest, rises, sensitivity]).astype(np.float64)


@dataclass(frozen=True, slots=True)
class PodRegimeWindow:
    """One closed node window: its model input row and how many of its pods could be read."""

    node: str
    pane: int
    ts_ms: int
    x: np.ndarray
    """float32 row of ``N_COLUMNS`` (NaN = not measurable)."""
    node_x: np.ndarray
    """The node's own feature row (``featurelib.node.schema``), for the node model's abstention rules."""
    pods: int
    """Pods judged (present in the pane's newest sample with per-cgroup counts and some work done)."""
    referenced: int
    """Of those, pods whose job had a reference."""


@dataclass(slots=True)
class _PodSums:
    counts: dict[str, float]
    covered_ms: int = 0
    last_ms: int = -1
    complete: bool = True
    """False once a sample of the pane lacked one of its events: its ratios would mix samples, so it is not read."""


@dataclass(frozen=True, slots=True)
class _PodSpan:
    """A pod's counts in one closed window it was read in."""

    pane: int
    counts: dict[str, float]
    covered_ms: int


@dataclass(slots=True)
class _Pane:
    newest_ms: int = -1
    pods: dict[str, _PodSums] = field(default_factory=dict)


class PodRegimeWindows:
    """NodeState dicts (with per-cgroup counters) → :class:`PodRegimeWindow` per closed node window.

    The node side is ``featurelib.node.NodeWindows`` (the features stage's code); beside it each pod's cgroup
    counts are summed per pane. When a pane closes, its pods present in its newest sample are judged: their
    ratios go into their jobs' references (``job_of``), then each is read against its job's reference. Bounded:
    ``max_nodes`` nodes (the longest-idle forgotten), ``max_pods`` pods per pane (the rest ignored, counted in
    ``dropped_pods``), ``span_windows`` windows per pod read (a pod not read in a window starts its span again).
    """

    def __init__(self, job_of: JobOf, *, reference: JobReference | None = None, max_nodes: int = 10_000,
                 max_pods: int = 256, span_windows: int = 1) -> None:
        self.job_of = job_of
        self.reference = reference or JobReference()
        self.max_nodes = max_nodes
        self.max_pods = max_pods
        self.span_windows = check_span_windows(span_windows)
        self.dropped_pods = 0
        self.machine = NodeWindows(DictStore())
        self._panes: OrderedDict[str, dict[int, _Pane]] = OrderedDict()
        self._previous: dict[str, tuple[int, np.ndarray]] = {}
        self._spans: dict[str, dict[str, deque[_PodSpan]]] = {}

    def observe(self, state: Mapping[str, Any]) -> list[PodRegimeWindow]:
        """Take one NodeState (the contract's dict form); the node windows it closed."""
        sample = sample_from_dict(dict(state))
        outcome = self.machine.observe(sample)
        node = sample.node
        if outcome.status == "accepted":
            self._add(node, self.machine.pane_of(node, sample.ts_ms), sample.ts_ms, int(state["interval_ms"]),
                      state.get("cgroups") or {})
        return [self._close(w.node, w.pane, w.ts_ms, as_model_input(w.values, w.valid)) for w in outcome.windows]

    def _add(self, node: str, pane_index: int, ts_ms: int, interval_ms: int,
             cgroups: Mapping[str, Mapping[str, Any]]) -> None:
        panes = self._panes.pop(node, None)
        if panes is None:
            panes = {}
        self._panes[node] = panes
        while len(self._panes) > self.max_nodes:
            gone, _ = self._panes.popitem(last=False)
            self._previous.pop(gone, None)
            self._spans.pop(gone, None)
        pane = panes.setdefault(pane_index, _Pane())
        pane.newest_ms = max(pane.newest_ms, ts_ms)
        for cgroup, counters in cgroups.items():
            uid = pod_uid_of(cgroup)
            if uid is None:
                continue
            pod = pane.pods.get(uid)
            if pod is None:
                if len(pane.pods) >= self.max_pods:
                    self.dropped_pods += 1
                    continue
                pod = pane.pods[uid] = _PodSums(dict.fromkeys(EXTENDED_EVENTS, 0.0))
            if add_counts(pod.counts, counters, EXTENDED_EVENTS):
                pod.complete = False
            pod.covered_ms += interval_ms
            pod.last_ms = ts_ms

    def _close(self, node: str, pane_index: int, ts_ms: int, node_x: np.ndarray) -> PodRegimeWindow:
        panes = self._panes.get(node, {})
        pane = panes.pop(pane_index, None) or _Pane()
        for old in [i for i in panes if i < pane_index]:
            del panes[old]
        judged: list[tuple[str, str | None, np.ndarray]] = []
        spans = self._spans.get(node, {})
        kept: dict[str, deque[_PodSpan]] = {}
        for uid, pod in pane.pods.items():
            if pod.last_ms != pane.newest_ms or not pod.complete:
                continue
            if pod.counts["instructions"] <= 0 or pod.counts["cycles"] <= 0:
                continue
            counts, covered_ms = pod.counts, pod.covered_ms
            if self.span_windows > 1:
                span = kept[uid] = self._span_of(spans.get(uid), pane_index, _PodSpan(pane_index, counts, covered_ms))
                counts = {event: sum(s.counts[event] for s in span) for event in counts}
                covered_ms = sum(s.covered_ms for s in span)
            judged.append((uid, self.job_of(uid), pod_row(counts, covered_ms / 1000.0)))
        if self.span_windows > 1:
            self._spans[node] = kept  # a pod not read in this window starts its span again
        for uid, job, row in judged:
            if job is not None:
                self.reference.add(ts_ms, job, uid, row)
        rows = np.asarray([row for _, _, row in judged], dtype=np.float64).reshape(-1, len(ROW_FEATURES))
        refs = [self.reference.reference(job, ts_ms) if job is not None else None for _, job, _ in judged]
        current = np.concatenate([victim_columns(rows, deviations(rows, refs)), node_x.astype(np.float64)])
        previous = self._previous.get(node)
        lag = previous[1] if previous is not None and 0 < ts_ms - previous[0] <= LAG_MAX_MS else None
        self._previous[node] = (ts_ms, current)
        row = np.concatenate([current, lag if lag is not None else np.full(len(current), np.nan)])
        return PodRegimeWindow(node, pane_index, ts_ms, row.astype(np.float32), node_x, len(judged),
                               sum(r is not None for r in refs))

    def _span_of(self, span: deque[_PodSpan] | None, pane_index: int, newest: _PodSpan) -> deque[_PodSpan]:
        """The pod's windows within the last ``span_windows`` panes, ``newest`` included."""
        if span is None:
            span = deque(maxlen=self.span_windows)
        while span and span[0].pane <= pane_index - self.span_windows:
            span.popleft()
        span.append(newest)
        return span
