"""Sliding event-time windows of binned inputs and answers, and the drift verdict on them (pure).

Each row is binned once, on arrival, with the reference's edges; the window keeps the bin
indices and a running count matrix, so a report costs one PSI per input whatever the window
size. Time is event time (the inputs' ``ts_ms``): a replay gives the same reports, and delays
are measured in traffic seconds, not in how fast the stage caught up.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from featurelib.drift_profile import BinnedProfile, ReferenceProfile, psi

MISSING = -1
Status = Literal["drift", "no_drift", "insufficient_data"]


class SlidingCounts:
    """Per column, counts of bin indices over the rows of the last ``window_ms`` of event time.

    Column ``c`` has ``bins[c]`` bins; index ``MISSING`` counts as missing.
    """

    def __init__(self, bins: Sequence[int], window_ms: int) -> None:
        self.bins = np.asarray(bins, dtype=np.int64)
        self.window_ms = window_ms
        # the last column of each row counts missing values
        self.counts = np.zeros((len(bins), int(self.bins.max(initial=1)) + 1), dtype=np.int64)
        self.rows: deque[tuple[int, np.ndarray]] = deque()
        self.newest_ms = 0
        self._cols = np.arange(len(bins))

    def __len__(self) -> int:
        return len(self.rows)

    def _slot(self, idx: np.ndarray) -> np.ndarray:
        return np.where(idx == MISSING, self.counts.shape[1] - 1, idx)

    def add(self, ts_ms: int, idx: np.ndarray) -> None:
        """One row's bin index per column (``MISSING`` = missing); older rows leave the window."""
        slots = self._slot(np.asarray(idx, dtype=np.int64))
        self.rows.append((ts_ms, slots))
        np.add.at(self.counts, (self._cols, slots), 1)
        self.newest_ms = max(self.newest_ms, ts_ms)
        self.evict(self.newest_ms)

    def evict(self, now_ms: int) -> None:
        horizon = now_ms - self.window_ms
        # rows arrive roughly in time order (several partitions): a late row leaves when it reaches the front
        while self.rows and self.rows[0][0] <= horizon:
            _, slots = self.rows.popleft()
            np.subtract.at(self.counts, (self._cols, slots), 1)

    def valid_counts(self, col: int) -> np.ndarray:
        return self.counts[col, : self.bins[col]]

    def missing(self, col: int) -> int:
        return int(self.counts[col, -1])

    def span_ms(self) -> int:
        return self.newest_ms - self.rows[0][0] if self.rows else 0


def bin_rows(x: np.ndarray, profiles: Sequence[BinnedProfile]) -> np.ndarray:
    """Bin indices (rows x columns) of ``x`` with each column's reference edges; ``MISSING`` where not finite."""
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    out = np.empty(x.shape, dtype=np.int64)
    for c, p in enumerate(profiles):
        col = x[:, c]
        finite = np.isfinite(col)
        out[:, c] = np.where(finite, np.searchsorted(np.asarray(p.edges), np.where(finite, col, 0.0), side="right"),
                             MISSING)
    return out


@dataclass(frozen=True)
class Thresholds:
    feature_psi: float = 0.25
    """An input counts as drifted over this PSI (the usual "significant shift" convention)."""
    data_score: float = 0.12
    """Data drift when the mean PSI over the inputs exceeds this (docs/drift.md: 0.03-0.06 measured on unshifted
    traffic of the training kinds, 0.2-0.27 with counter scales shifted on half the nodes)."""
    prediction_psi: float = 0.2
    missing_increase: float = 0.2
    """Drift when the window's mean missing-input share exceeds the reference's by more than this."""
    min_samples: int = 300
    """No claim (``insufficient_data``) on fewer rows than this."""
    min_span: float = 0.9
    """Nor before the rows span this fraction of the window: the first minutes of a node's windows (60 s
    features still filling) are unlike steady traffic, and a part-filled window holds only them."""
    top_features: int = 10


@dataclass(frozen=True)
class FeatureScore:
    feature: str
    psi: float
    missing_rate: float
    reference_missing_rate: float


@dataclass(frozen=True)
class Verdict:
    status: Status
    samples: int
    prediction_samples: int
    window_s: float
    reasons: list[str] = field(default_factory=list)
    data_score: float | None = None
    max_psi: float | None = None
    features_over: int = 0
    features: list[FeatureScore] = field(default_factory=list)
    prediction_psi: float | None = None
    predictions: dict[str, float] = field(default_factory=dict)
    missing_rate: float | None = None
    reference_missing_rate: float | None = None


class DriftMonitor:
    """One model's windows: its inputs (binned with the profile) and its categorical answers."""

    def __init__(self, profile: ReferenceProfile, window_ms: int, thresholds: Thresholds) -> None:
        self.profile = profile
        self.thresholds = thresholds
        self.window_ms = window_ms
        self.inputs = SlidingCounts([p.bins for p in profile.features], window_ms)
        self.classes = list(profile.classes)
        self._class_index = {c: i for i, c in enumerate(self.classes)}
        self.answers = SlidingCounts([max(1, len(self.classes))], window_ms)
        self.outputs = SlidingCounts([p.bins for p in profile.outputs] or [1], window_ms)

    def add_inputs(self, ts_ms: np.ndarray, x: np.ndarray) -> None:
        """Rows of the model's inputs in profile order (NaN = missing) and each row's event time."""
        for ts, row in zip(np.asarray(ts_ms).tolist(), bin_rows(x, self.profile.features), strict=True):
            self.inputs.add(int(ts), row)

    def add_answer(self, ts_ms: int, answer: str) -> None:
        """One answer; one the reference never gave is counted as missing (and named in ``reasons``)."""
        idx = self._class_index.get(answer, MISSING)
        self.answers.add(ts_ms, np.array([idx]))

    def add_outputs(self, ts_ms: int, values: np.ndarray) -> None:
        """One numeric answer per profile output (e.g. a probability per horizon; NaN = not given)."""
        self.outputs.add(ts_ms, bin_rows(np.asarray(values).reshape(1, -1), self.profile.outputs)[0])

    def evaluate(self) -> Verdict:
        th = self.thresholds
        windows = (self.inputs, self.answers, self.outputs)
        now = max(w.newest_ms for w in windows)
        for w in windows:
            w.evict(now)
        n, n_answers = len(self.inputs), max(len(self.answers), len(self.outputs))
        window_s = max(w.span_ms() for w in windows) / 1000
        if n < th.min_samples and n_answers < th.min_samples:
            return Verdict("insufficient_data", n, n_answers, window_s,
                           [f"{n} inputs and {n_answers} answers in the window; a claim needs {th.min_samples}"])
        if window_s < th.min_span * self.window_ms / 1000:
            return Verdict("insufficient_data", n, n_answers, window_s,
                           [f"the window spans {window_s:.0f} s of traffic; a claim needs "
                            f"{th.min_span * self.window_ms / 1000:.0f} s"])
        reasons: list[str] = []
        drifted = False
        scores: list[FeatureScore] = []
        data_score = max_psi = missing_rate = ref_missing = None
        over = 0
        if n >= th.min_samples:
            for c, p in enumerate(self.profile.features):
                value = psi(p.proportions, self.inputs.valid_counts(c))
                # an input missing in the whole window has no distribution to compare: its missing rate says it
                scores.append(FeatureScore(p.name, 0.0 if math.isnan(value) else value,
                                           self.inputs.missing(c) / n, p.missing_rate))
            values = np.array([s.psi for s in scores])
            data_score, max_psi = float(values.mean()), float(values.max(initial=0.0))
            over = int((values > th.feature_psi).sum())
            missing_rate = float(np.mean([s.missing_rate for s in scores]))
            ref_missing = float(np.mean([p.missing_rate for p in self.profile.features]))
            scores.sort(key=lambda s: s.psi, reverse=True)
            if data_score > th.data_score:
                drifted = True
                reasons.append(f"data: mean PSI {data_score:.3f} > {th.data_score} ({over} of {len(scores)} inputs "
                               f"over {th.feature_psi}; worst {scores[0].feature} {scores[0].psi:.2f})")
            if missing_rate - ref_missing > th.missing_increase:
                drifted = True
                reasons.append(f"missing inputs: {missing_rate:.2f} of values vs {ref_missing:.2f} in the reference")
        prediction_psi = None
        shares: dict[str, float] = {}
        if len(self.answers) >= th.min_samples and self.classes:
            counts = self.answers.valid_counts(0)
            unseen = self.answers.missing(0)
            shares = {c: int(k) / len(self.answers) for c, k in zip(self.classes, counts, strict=True)}
            prediction_psi = psi(list(self.profile.classes.values()), counts)
            if math.isnan(prediction_psi):
                prediction_psi = None
            elif prediction_psi > th.prediction_psi:
                drifted = True
                reasons.append(f"prediction: PSI {prediction_psi:.3f} > {th.prediction_psi} of the answers' "
                               "distribution")
            if unseen:  # named, not a verdict: the shares above leave them out
                reasons.append(f"prediction: {unseen} answers outside the reference's classes")
        if len(self.outputs) >= th.min_samples and self.profile.outputs:
            # numeric answers (a probability per horizon): the worst output's PSI is the prediction drift
            per_output = {p.name: psi(p.proportions, self.outputs.valid_counts(c))
                          for c, p in enumerate(self.profile.outputs)}
            finite = {k: v for k, v in per_output.items() if not math.isnan(v)}
            if finite:
                worst = max(finite, key=lambda k: finite[k])
                prediction_psi = finite[worst]
                if prediction_psi > th.prediction_psi:
                    drifted = True
                    reasons.append(f"prediction: PSI {prediction_psi:.3f} > {th.prediction_psi} of {worst}; "
                                   + ", ".join(f"{k} {v:.3f}" for k, v in finite.items()))
        status: Status = "drift" if drifted else "no_drift"
        return Verdict(status, n, n_answers, window_s, reasons, data_score, max_psi, over, scores[: th.top_features],
                       prediction_psi, shares, missing_rate, ref_missing)
