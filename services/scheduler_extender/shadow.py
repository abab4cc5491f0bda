"""``EXTENDER_POLICY=learned``: the learned placement policy in shadow beside the heuristic.

After each prioritize answer (which is always the heuristic's), the candidates are scored again by the
learned Q-table and the two top nodes compared (:func:`learned.decide`). Recorded: a counter per outcome,
the last decisions (``/debug/shadow``) and, at most ``log_per_min`` a minute, a log line per disagreement
with the pod, both nodes, both scores and the trace id of the request's span. Nothing here changes an
answer: the learned policy never binds (docs/placement.md, "Serving").
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from operator import itemgetter
from typing import Any

import numpy as np
from prometheus_client import Counter

from featurelib.placement import PlacementModel
from services.scheduler_extender.extender import Explanation
from services.scheduler_extender.learned import LearnedScorer, PodIn, ShadowDecision, decide
from services.scheduler_extender.podindex import PodIndex
from services.scheduler_extender.scoring import NodeCard
from services.scheduler_extender.state import NodeStateStore

log = logging.getLogger(__name__)
SHADOW_DECISIONS = Counter(
    "borg_extender_shadow_decisions_total",
    "Prioritize calls scored in shadow by the learned placement policy, by whether its top node is the heuristic's",
    ["agree"],
)
SHADOW_SKIPPED = Counter(
    "borg_extender_shadow_skipped_total",
    "Prioritize calls the learned shadow could not score (no candidate with a known node, or no model)",
    ["reason"],
)
_scores_of = itemgetter(NodeCard._fields.index("scores"))


class Shadow:
    def __init__(
        self,
        store: NodeStateStore,
        index: PodIndex,
        model: Callable[[], PlacementModel | None],
        *,
        staleness_ms: int,
        keep: int = 100,
        log_per_min: int = 10,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.index = index
        self.model = model
        self.scorer = LearnedScorer(staleness_ms)
        # a node's cached Q goes when its regime label or its pods change
        store.listeners.append(self.scorer.invalidate)
        index.listeners.append(self.scorer.invalidate)
        self.recent: deque[dict[str, Any]] = deque(maxlen=keep)
        self.counts = {"true": 0, "false": 0, "skipped": 0}
        self.log_per_min = log_per_min
        self.clock = clock
        self._window_start = clock()
        self._logged = 0
        self.suppressed = 0
        self.synced: Callable[[], bool] = lambda: True  # the pods/nodes watch has listed both once

    def observe(self, ex: Explanation, trace_id: str | None = None) -> ShadowDecision | None:
        """Score one answered prioritize call with the learned policy and record how it compares."""
        model = self.model()
        if model is None:
            self._skip("no_model")
            return None
        ci = ex.class_index
        pod = PodIn(ex.pod.workload_class, ex.pod.milli_cpu)
        q = self.scorer.scores(pod, ex.nodes, self.store.regime, self.index.view, model, ex.ts_ms)
        heuristic = np.fromiter(map(itemgetter(ci), map(_scores_of, ex.cards)), dtype=np.int64, count=len(ex.cards))
        decision = decide(ex.nodes, heuristic, q)
        if decision is None:
            self._skip("no_known_node")
            return None
        agree = "true" if decision.agree else "false"
        SHADOW_DECISIONS.labels(agree).inc()
        self.counts[agree] += 1
        self.recent.append(
            {
                "pod": ex.pod.key,
                "workload_class": ex.pod.workload_class,
                "ts_ms": ex.ts_ms,
                "trace_id": trace_id,
                **decision.as_dict(),
            }
        )
        if not decision.agree:
            self._log(ex, decision, trace_id)
        return decision

    def _skip(self, reason: str) -> None:
        SHADOW_SKIPPED.labels(reason).inc()
        self.counts["skipped"] += 1

    def _log(self, ex: Explanation, d: ShadowDecision, trace_id: str | None) -> None:
        now = self.clock()
        if now - self._window_start >= 60.0:
            if self.suppressed:
                log.info("shadow: %d more disagreements in the last minute not logged", self.suppressed)
            self._window_start, self._logged, self.suppressed = now, 0, 0
        if self._logged >= self.log_per_min:
            self.suppressed += 1
            return
        self._logged += 1
        log.info(
            "shadow disagreement pod=%s class=%s heuristic=%s (score %d, q %s) learned=%s (q %.4f, score %d) "
            "candidates=%d scored=%d trace_id=%s",
            ex.pod.key,
            ex.pod.workload_class,
            d.heuristic_node,
            d.heuristic_score,
            "-" if d.heuristic_q is None else f"{d.heuristic_q:.4f}",
            d.learned_node,
            d.learned_q,
            d.learned_score,
            d.candidates,
            d.scored,
            trace_id or "-",
        )

    def debug_node(self, name: str) -> dict[str, Any] | None:
        """What the learned state knows of one node from the pods/nodes watch (None: not known)."""
        ctx = self.index.node(name)
        return None if ctx is None else {**ctx._asdict(), "classes": sorted(ctx.classes)}

    def debug(self, version: str | None) -> dict[str, Any]:
        return {
            "policy": "learned",
            "mode": "shadow",
            "model_version": version,
            "decisions": dict(self.counts),
            "watch_synced": self.synced(),
            "nodes_known": len(self.index),
            "pods_bound": self.index.pods,
            "recent": list(self.recent),
        }
