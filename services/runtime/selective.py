"""Comparing two abstaining models fairly: accuracy at matched coverage, and correct answers overall.

A model that abstains more is more accurate when it answers, by construction: comparing
accuracy-when-answering rewards the narrower model and can roll back a candidate that is right on
far more windows. So the two models are compared on the same labelled windows at the **same
coverage**: the broader model keeps only its ``n`` most confident answers, ``n`` being how many the
narrower one gave, and accuracy is compared on those (``matched_accuracy``; which model is narrower
does not matter). The share of labelled windows each model got right (``correct``; an abstention is
not correct) says whether the broader model's extra answers pay.

Pure: numpy arrays in, :class:`~services.runtime.rollout.Comparison` out; the rule that judges them
is ``rollout.judge``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.runtime.rollout import Comparison


@dataclass(frozen=True)
class Answers:
    """One model on the labelled windows (same order for both models)."""

    answered: np.ndarray
    """bool: the model did not abstain."""
    correct: np.ndarray
    """bool: answered and equal to the label."""
    confidence: np.ndarray
    """float: the model's own confidence in its answer (top class probability); ranks its answers."""

    def __post_init__(self) -> None:
        if not (len(self.answered) == len(self.correct) == len(self.confidence)):
            raise ValueError("answered, correct and confidence must have one entry per labelled window")


def top_correct(a: Answers, n: int) -> int:
    """Correct answers among the model's ``n`` most confident answers (ties: earlier windows first)."""
    if n <= 0:
        return 0
    index = np.flatnonzero(a.answered)
    if n >= index.size:
        return int(np.count_nonzero(a.correct[index]))
    # stable sort on -confidence: equal confidences keep window order, so the result is reproducible
    ranked = index[np.argsort(-a.confidence[index], kind="stable")[:n]]
    return int(np.count_nonzero(a.correct[ranked]))


def matched(current: Answers, candidate: Answers) -> tuple[float, float, int]:
    """(current accuracy, candidate accuracy, n) on each model's ``n`` most confident answers, ``n`` the
    smaller of their answer counts; (0, 0, 0) when either never answered."""
    n = min(int(np.count_nonzero(current.answered)), int(np.count_nonzero(candidate.answered)))
    if n == 0:
        return 0.0, 0.0, 0
    return top_correct(current, n) / n, top_correct(candidate, n) / n, n


def compare(current: Answers, candidate: Answers, *, coverage_margin: float) -> list[Comparison]:
    """The labelled-window comparisons a rollout judges (empty with no labelled window).

    ``matched_accuracy`` uses the rollout's margin and counts its ``n`` as samples; ``correct`` and
    ``coverage`` (answered / labelled) are judged with the wider ``coverage_margin``: a candidate
    that is as good where both answer but more cautious is not a worse one, one that gets far
    fewer windows right is.
    """
    labelled = len(current.answered)
    if labelled == 0:
        return []
    acc_cur, acc_cand, n = matched(current, candidate)
    return [
        Comparison("matched_accuracy", acc_cur, acc_cand, n),
        Comparison("correct", float(np.count_nonzero(current.correct)) / labelled,
                   float(np.count_nonzero(candidate.correct)) / labelled, labelled, margin=coverage_margin),
        Comparison("coverage", float(np.count_nonzero(current.answered)) / labelled,
                   float(np.count_nonzero(candidate.answered)) / labelled, labelled, margin=coverage_margin),
    ]
