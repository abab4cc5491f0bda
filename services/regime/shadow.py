"""Shadow scoring for the regime stage: the candidate scores every window the current model scores.

``split`` runs the candidate once on the batch's model input (the same float32 rows), compares the
raw answers of both (argmax, or ``unknown`` where the model's own abstention rules say so: what the
model claims for the window, before hysteresis), labels what it can from the truth side channel
(``truth.py``), and returns the batch cut in two: the rows the current model answers (published
as before) and, during a rollout step, the rows of nodes the candidate serves, with the candidate's
outputs. Answers are compared by regime name, so a candidate whose classes are ordered otherwise is
compared correctly.

A candidate that fails (raises, or answers NaN) on more than 1 % of the windows is rolled back
(``completion``). Online metrics on labelled windows (``RegimeShadowStats``, judged by
``services/runtime/selective.py``): ``matched_accuracy`` = accuracy of both models at the same
coverage (the broader one's most confident answers, as many as the narrower one gave; judged
against ``ROLLOUT_MARGIN``), ``correct`` = correct / labelled and ``coverage`` = answered / labelled
(judged against the wider ``ROLLOUT_COVERAGE_MARGIN``: a more cautious model is not a worse one).
Accuracy when answering is shown, not judged: it rewards the model that abstains more. Agreement
(same answer, ``unknown`` included) over every window.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prometheus_client import Counter

from contracts.models import UNKNOWN_REGIME
from services.regime.model import RegimeModel
from services.regime.truth import TruthTail
from services.runtime import selective
from services.runtime.rollout import Comparison, node_bucket
from services.runtime.rollout_watch import Live
from services.runtime.selective import Answers
from services.runtime.vector_batch import ScoredBatch

log = logging.getLogger(__name__)
WINDOWS = Counter("borg_shadow_windows_total", "Windows both models scored, by outcome", ["model", "outcome"])
TRUTH_POLL_S = 0.5
KEPT_LABELLED = 50_000
"""Labelled windows whose answers are kept for the matched-coverage comparison (the latest): a judgement
ranks them (an argsort per poll, a few ms at this size), and 50,000 labels decide any margin we use."""


def answers(model: RegimeModel, x: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Per row the regime the model claims, or ``unknown`` where it abstains (object array of names)."""
    masks, _ = model.judge(x, probs)
    names: np.ndarray = np.asarray(model.regimes, dtype=object)[probs.argmax(axis=1)]
    names[masks != 0] = UNKNOWN_REGIME
    return names


@dataclass
class RegimeShadowStats:
    """Counts since the rollout started (``reset`` when a new one begins).

    Per labelled window both models' answers are kept (answered, correct, confidence) so that
    ``selective.compare`` can rank each model's answers by its own confidence; at most
    ``KEPT_LABELLED`` windows (the latest), about 1 MB. The comparisons are computed once per change
    of the counts (a poll asks for them several times: judge, metrics, summary).
    """

    coverage_margin: float = 0.25
    """A more cautious model answers less often: coverage (and correct answers) have their own, wider margin."""
    labels_expected: bool = False
    """A truth source is configured (``RegimeShadow`` sets it): no step advances on compared windows alone."""
    compared: int = 0
    agreed: int = 0
    failed: int = 0
    labelled: int = 0
    _kept: list[tuple[Answers, Answers]] = field(default_factory=list)
    _kept_n: int = 0
    _memo: tuple[tuple[int, int, int], list[Comparison]] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    """``observe`` runs on the stream, ``both`` on the rollout watcher's worker thread."""

    def reset(self) -> None:
        with self._lock:
            self.compared = self.agreed = self.failed = self.labelled = self._kept_n = 0
            self._kept = []
            self._memo = None

    def observe(self, current: np.ndarray, candidate: np.ndarray, truth: list[str | None],
                current_conf: np.ndarray, candidate_conf: np.ndarray) -> None:
        """Answers (names, ``unknown`` = abstained) and confidences (top probability) of both models per window."""
        self.compared += len(current)
        self.agreed += int(np.count_nonzero(current == candidate))
        rows = np.flatnonzero(np.fromiter((t is not None for t in truth), dtype=bool, count=len(truth)))
        if not rows.size:
            return
        labels = np.asarray(truth, dtype=object)[rows]
        pair = tuple(_answers(got[rows], labels, np.asarray(conf, dtype=np.float64)[rows])
                     for got, conf in ((current, current_conf), (candidate, candidate_conf)))
        with self._lock:
            self._kept.append((pair[0], pair[1]))
            self._kept_n += rows.size
            while self._kept_n - len(self._kept[0][0].answered) >= KEPT_LABELLED:
                self._kept_n -= len(self._kept.pop(0)[0].answered)
        self.labelled += int(rows.size)

    def both(self) -> tuple[Answers, Answers]:
        """Both models' answers on the kept labelled windows (joined into one chunk, cut to the latest)."""
        with self._lock:
            if not self._kept:
                empty = Answers(np.zeros(0, bool), np.zeros(0, bool), np.zeros(0))
                return empty, empty
            if len(self._kept) > 1:
                joined = (_join([k[0] for k in self._kept]), _join([k[1] for k in self._kept]))
                self._kept = [joined]
                self._kept_n = len(joined[0].answered)
            return self._kept[0]

    def agreement(self) -> float | None:
        return self.agreed / self.compared if self.compared else None

    def comparisons(self) -> list[Comparison]:
        counts = (self.compared, self.failed, self.labelled)
        if self._memo is not None and self._memo[0] == counts:
            return list(self._memo[1])
        out = self._compare()
        self._memo = (counts, out)
        return out

    def _compare(self) -> list[Comparison]:
        scored = self.compared + self.failed
        # a candidate that fails on windows the current model scores is rolled back (1 % slack)
        out = [Comparison("completion", 1.0, self.compared / scored, scored, margin=0.01, labelled=False)] \
            if scored else []
        return [*out, *selective.compare(*self.both(), coverage_margin=self.coverage_margin)]

    def summary(self) -> dict[str, Any]:
        cur, cand = self.both()
        when_answering = {}
        for which, a in (("current", cur), ("candidate", cand)):
            k = int(np.count_nonzero(a.answered))
            if k:  # accuracy when answering: shown, not judged (it favours the narrower model)
                when_answering[f"accuracy_{which}"] = int(np.count_nonzero(a.correct)) / k
        return {"compared": self.compared, "agreement": self.agreement(), "labelled": self.labelled,
                "candidate_failed": self.failed, **when_answering,
                **{f"{c.name}_{w}": v for c in self.comparisons()
                   for w, v in (("current", c.current), ("candidate", c.candidate))},
                **{f"{c.name}_samples": c.samples for c in self.comparisons() if c.name == "matched_accuracy"}}


def _join(chunks: list[Answers]) -> Answers:
    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(c, name) for c in chunks])[-KEPT_LABELLED:]

    return Answers(cat("answered"), cat("correct"), cat("confidence"))


def _answers(got: np.ndarray, labels: np.ndarray, confidence: np.ndarray) -> Answers:
    answered = got != UNKNOWN_REGIME
    return Answers(answered, answered & (got == labels), confidence)


class RegimeShadow:
    def __init__(self, stats: RegimeShadowStats, truth: TruthTail | None) -> None:
        self.stats = stats
        self.truth = truth
        stats.labels_expected = truth is not None
        self._truth_read = 0.0
        self._buckets: dict[str, float] = {}

    def _bucket(self, node: str) -> float:
        b = self._buckets.get(node)
        if b is None:
            if len(self._buckets) > 100_000:
                self._buckets.clear()
            b = self._buckets[node] = node_bucket(node)
        return b

    def _labels(self, scored: ScoredBatch[RegimeModel]) -> list[str | None]:
        truth = self.truth
        if truth is None:
            return [None] * len(scored.rows)
        now = time.monotonic()
        if now - self._truth_read >= TRUTH_POLL_S:
            self._truth_read = now
            truth.poll()
        return [truth.label(r.node, r.ts_ms) for r in scored.rows]

    def split(self, scored: ScoredBatch[RegimeModel], live: Live[RegimeModel]
              ) -> list[ScoredBatch[RegimeModel]]:
        """Score the candidate beside the current model; the parts to publish (current's first)."""
        x = scored.inputs
        if x is None or not scored.rows:
            return [scored]
        candidate = live.model
        try:
            c_probs, c_slowdown = candidate(x)
            if not (np.all(np.isfinite(c_probs)) and np.all(np.isfinite(c_slowdown))):
                raise ValueError("candidate output is not finite")
        except Exception as exc:  # the candidate never costs the current model's answers
            self.stats.failed += len(scored.rows)
            WINDOWS.labels("regime", "candidate_failed").inc(len(scored.rows))
            log.debug("regime shadow: candidate %s failed on a batch: %s", live.state.candidate, exc)
            return [scored]
        probs = scored.outputs[0]
        truth = self._labels(scored)
        self.stats.observe(answers(scored.model, x, probs), answers(candidate, x, c_probs), truth,
                           probs.max(axis=1), c_probs.max(axis=1))
        WINDOWS.labels("regime", "compared").inc(len(scored.rows))
        labelled = sum(t is not None for t in truth)
        if labelled:
            WINDOWS.labels("regime", "labelled").inc(labelled)
        fraction = live.state.fraction
        if fraction <= 0.0:
            return [scored]
        mine = np.fromiter((self._bucket(r.node) < fraction for r in scored.rows), dtype=bool, count=len(scored.rows))
        if not mine.any():
            return [scored]
        parts: list[ScoredBatch[RegimeModel]] = []
        for model, rows, outputs in ((scored.model, ~mine, scored.outputs), (candidate, mine, (c_probs, c_slowdown))):
            index = np.flatnonzero(rows)
            if index.size:
                parts.append(ScoredBatch(model, [scored.events[i] for i in index], [scored.rows[i] for i in index],
                                         tuple(o[index] for o in outputs), 0, x[index]))
        return parts
