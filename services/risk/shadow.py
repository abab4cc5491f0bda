"""Shadow scoring for the risk stage: the candidate scores the same tasks, on its own input columns.

Failure labels come hours later (the outcome after each horizon, from taskevents.v1), too late and
too costly to join in this stage: the comparison is agreement only. Per scored task: the largest
|Δ probability| over the horizons (``close`` when ≤ ``CLOSE``: the share of close tasks is the
``agreement`` the rollback floor ``RISK_ROLLOUT_MIN_AGREEMENT`` reads), the mean |Δ| and, for
batches of ``RANK_MIN`` tasks or more (the periodic re-score), the Spearman rank correlation of the
two models' first-horizon risk (do they order the tasks alike). A candidate that fails, answers
NaN or has other horizons than the current model is counted in ``completion`` (rolled back over 1 %).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from prometheus_client import Counter

from services.risk.model import FailureModel
from services.runtime.rollout import Comparison

log = logging.getLogger(__name__)
CLOSE = 0.1
RANK_MIN = 10
TASKS = Counter("borg_shadow_tasks_total", "Task scorings both risk models made, by outcome", ["outcome"])


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    """Rank correlation (ties broken by position); None when either side is constant."""
    ra, rb = np.argsort(np.argsort(a)).astype(np.float64), np.argsort(np.argsort(b)).astype(np.float64)
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])


@dataclass
class RiskShadowStats:
    labels_expected: bool = False
    """Failure outcomes are not joined here: steps advance on compared tasks (agreement-only rollouts)."""
    compared: int = 0
    close: int = 0
    failed: int = 0
    abs_delta: float = 0.0
    rank_sum: float = 0.0
    rank_batches: int = 0

    def reset(self) -> None:
        self.compared = self.close = self.failed = self.rank_batches = 0
        self.abs_delta = self.rank_sum = 0.0

    def observe(self, current: np.ndarray, candidate: np.ndarray) -> None:
        delta = np.abs(current - candidate).max(axis=1)
        self.compared += len(delta)
        self.close += int(np.count_nonzero(delta <= CLOSE))
        self.abs_delta += float(delta.sum())
        if len(delta) >= RANK_MIN:
            rho = spearman(current[:, 0], candidate[:, 0])
            if rho is not None:
                self.rank_sum += rho
                self.rank_batches += 1

    def agreement(self) -> float | None:
        return self.close / self.compared if self.compared else None

    def comparisons(self) -> list[Comparison]:
        scored = self.compared + self.failed
        return [Comparison("completion", 1.0, self.compared / scored, scored, margin=0.01, labelled=False)] \
            if scored else []

    def summary(self) -> dict[str, Any]:
        return {"compared": self.compared, "agreement": self.agreement(), "candidate_failed": self.failed,
                "mean_abs_delta": self.abs_delta / self.compared if self.compared else None,
                "rank_agreement": self.rank_sum / self.rank_batches if self.rank_batches else None, "labelled": 0}


def compare(stats: RiskShadowStats, current: FailureModel, candidate: FailureModel,
            rows: Callable[[FailureModel], np.ndarray], results: Sequence[Any | None]) -> list[np.ndarray | None]:
    """The candidate's probabilities per task (None where it or the current model failed)."""
    n = len(results)
    try:
        if candidate.horizons_s != current.horizons_s:
            raise ValueError(f"horizons {candidate.horizons_s} differ from the current {current.horizons_s}")
        (probs,) = candidate(rows(candidate))
        if not np.all(np.isfinite(probs)):
            raise ValueError("candidate output is not finite")
    except Exception as exc:  # the candidate never costs the current model's answers
        stats.failed += n
        TASKS.labels("candidate_failed").inc(n)
        log.debug("risk shadow: candidate %s failed: %s", candidate.version, exc)
        return [None] * n
    ok = [i for i, r in enumerate(results) if r is not None]
    if ok:
        stats.observe(np.stack([np.asarray(r[0], dtype=np.float64) for r in results if r is not None]), probs[ok])
        TASKS.labels("compared").inc(len(ok))
    return [probs[i] if results[i] is not None else None for i in range(n)]
