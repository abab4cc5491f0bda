"""Shadow scoring for the regime stage: the candidate scores every window the current model scores.

``split`` runs the candidate once on the batch's model input (the same float32 rows), compares the
raw answers of both (argmax, or ``unknown`` where the model's own abstention rules say so: what the
model claims for the window, before hysteresis), labels what it can from the truth side channel
(``truth.py``), and returns the batch cut in two: the rows the current model answers (published
as before) and, during a rollout step, the rows of nodes the candidate serves, with the candidate's
outputs. Answers are compared by regime name, so a candidate whose classes are ordered otherwise is
compared correctly.

A candidate that fails (raises, or answers NaN) on more than 1 % of the windows is rolled back
(``completion``). Online metrics on labelled windows (``RegimeShadowStats``): ``accuracy`` = correct / answered
(what an answer is worth), ``coverage`` = answered / labelled (how often it answers). Accuracy is
judged against ``ROLLOUT_MARGIN``, coverage against its own ``ROLLOUT_COVERAGE_MARGIN`` (a more cautious
model is not a worse one); agreement (same answer, ``unknown`` included) over every window.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prometheus_client import Counter

from contracts.models import UNKNOWN_REGIME
from services.regime.model import RegimeModel
from services.regime.truth import TruthTail
from services.runtime.rollout import Comparison, node_bucket
from services.runtime.rollout_watch import Live
from services.runtime.vector_batch import ScoredBatch

log = logging.getLogger(__name__)
WINDOWS = Counter("borg_shadow_windows_total", "Windows both models scored, by outcome", ["model", "outcome"])
TRUTH_POLL_S = 0.5


def answers(model: RegimeModel, x: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Per row the regime the model claims, or ``unknown`` where it abstains (object array of names)."""
    masks, _ = model.judge(x, probs)
    names: np.ndarray = np.asarray(model.regimes, dtype=object)[probs.argmax(axis=1)]
    names[masks != 0] = UNKNOWN_REGIME
    return names


@dataclass
class RegimeShadowStats:
    """Counts since the rollout started (``reset`` when a new one begins)."""

    coverage_margin: float = 0.25
    """A more cautious model answers less often: coverage has its own, wider margin."""
    compared: int = 0
    agreed: int = 0
    failed: int = 0
    labelled: int = 0
    answered: dict[str, int] = field(default_factory=lambda: {"current": 0, "candidate": 0})
    correct: dict[str, int] = field(default_factory=lambda: {"current": 0, "candidate": 0})

    def reset(self) -> None:
        self.compared = self.agreed = self.failed = self.labelled = 0
        self.answered = {"current": 0, "candidate": 0}
        self.correct = {"current": 0, "candidate": 0}

    def observe(self, current: np.ndarray, candidate: np.ndarray, truth: list[str | None]) -> None:
        self.compared += len(current)
        self.agreed += int(np.count_nonzero(current == candidate))
        for which, got in (("current", current), ("candidate", candidate)):
            for answer, label in zip(got.tolist(), truth, strict=True):
                if label is not None and answer != UNKNOWN_REGIME:
                    self.answered[which] += 1
                    self.correct[which] += answer == label
        self.labelled += sum(label is not None for label in truth)

    def agreement(self) -> float | None:
        return self.agreed / self.compared if self.compared else None

    def comparisons(self) -> list[Comparison]:
        scored = self.compared + self.failed
        # a candidate that fails on windows the current model scores is rolled back (1 % slack)
        out = [Comparison("completion", 1.0, self.compared / scored, scored, margin=0.01)] if scored else []
        if not self.labelled:
            return out
        cur, cand = self.answered["current"], self.answered["candidate"]
        return [
            *out,
            Comparison("accuracy", self.correct["current"] / cur if cur else 0.0,
                       self.correct["candidate"] / cand if cand else 0.0, min(cur, cand)),
            Comparison("coverage", cur / self.labelled, cand / self.labelled, self.labelled,
                       margin=self.coverage_margin),
        ]

    def summary(self) -> dict[str, Any]:
        return {"compared": self.compared, "agreement": self.agreement(), "labelled": self.labelled,
                "candidate_failed": self.failed,
                **{f"{c.name}_{w}": v for c in self.comparisons()
                   for w, v in (("current", c.current), ("candidate", c.candidate))}}


class RegimeShadow:
    def __init__(self, stats: RegimeShadowStats, truth: TruthTail | None) -> None:
        self.stats = stats
        self.truth = truth
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
        self.stats.observe(answers(scored.model, x, probs), answers(candidate, x, c_probs), truth)
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
