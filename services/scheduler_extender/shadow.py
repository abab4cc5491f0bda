"""``EXTENDER_POLICY=learned``: the learned placement policy in shadow beside the heuristic.

After each prioritize answer (which is always the heuristic's), the candidates are scored again by the
learned Q-table and the two top nodes compared (:func:`learned.decide`). Recorded: a counter per outcome,
the last decisions (``/debug/shadow``) and, at most ``log_per_min`` a minute, a log line per disagreement
with the pod, both nodes, both scores and the trace id of the request's span. Nothing here changes an
answer: the learned policy never binds (docs/placement.md, "Serving").

Answering comes first. :meth:`Shadow.submit` queues an answered call; one worker task scores it in slices
(``slice_nodes`` candidates, at most ``slice_fills`` key-part rebuilds each) and between slices yields to
the event loop and waits while any scheduler call is being answered (:class:`Gate`), so a call arriving
during shadow work waits for at most the slice in progress. At most one call waits to be scored: a newer
one replaces it (``borg_extender_shadow_skipped_total{reason="busy"}``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Generator
from operator import itemgetter
from typing import Any, NamedTuple, TypeVar

import numpy as np
from prometheus_client import Counter

from featurelib.placement import PlacementModel
from services.scheduler_extender.extender import Explanation
from services.scheduler_extender.learned import IdsRenumberedError, LearnedScorer, PodIn, ShadowDecision, decide
from services.scheduler_extender.podindex import PodIndex
from services.scheduler_extender.scoring import NodeCard
from services.scheduler_extender.state import SLOT_ID, NodeStateStore, Slot

log = logging.getLogger(__name__)
SHADOW_DECISIONS = Counter(
    "borg_extender_shadow_decisions_total",
    "Prioritize calls scored in shadow by the learned placement policy, by whether its top node is the heuristic's",
    ["agree"],
)
SHADOW_SKIPPED = Counter(
    "borg_extender_shadow_skipped_total",
    "Prioritize calls the learned shadow did not score: no candidate with a known node, no model, a newer "
    "call replaced it while it waited (busy), or the node ids were renumbered while it was scored",
    ["reason"],
)
_SCORES = NodeCard._fields.index("scores")
_slot_id = itemgetter(SLOT_ID)
SLICE_NODES = 500
"""Candidates scored per slice of shadow work before the event loop gets a turn."""
SLICE_FILLS = 64
"""Key-part rebuilds (changed nodes, or every node after a reset) per slice."""
T = TypeVar("T")


def drain(steps: Generator[None, None, T]) -> T:
    """Run a sliced computation to the end at once."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: T = done.value
            return result


class Gate:
    """Scheduler calls being answered; shadow work waits while there is one (answers come first)."""

    def __init__(self) -> None:
        self.in_flight = 0
        self._idle: asyncio.Future[None] | None = None  # made by the loop that waits (benchmarks run several)

    def enter(self) -> None:
        self.in_flight += 1

    def leave(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        if not self.in_flight and self._idle is not None and not self._idle.done():
            self._idle.set_result(None)

    async def turn(self) -> None:
        """Let the event loop run what is ready (a request's handler), then wait until no call is in flight."""
        await asyncio.sleep(0)
        while self.in_flight:
            if self._idle is None or self._idle.done():
                self._idle = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._idle)


class Pending(NamedTuple):
    explanation: Explanation
    trace_id: str | None
    version: int  # the store's row version when the call was answered
    slots: list[Slot] | None  # the store's slots of the answer's candidates (their node ids), when known
    epoch: int  # of the node ids then


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
        slice_nodes: int = SLICE_NODES,
        slice_fills: int = SLICE_FILLS,
    ) -> None:
        self.store = store
        self.index = index
        self.model = model
        self.scorer = LearnedScorer(staleness_ms, store.node_ids)
        # a node's cached key parts go when its regime label or its pods change
        store.listeners.append(self.scorer.invalidate_regime)
        index.listeners.append(self.scorer.invalidate_pods)
        self.slice_nodes = slice_nodes
        self.slice_fills = slice_fills
        self.gate = Gate()
        self.slices = 0  # slices of shadow work run by the worker (yields to the event loop)
        self._pending: Pending | None = None
        self._worker: asyncio.Task[None] | None = None
        self.recent: deque[dict[str, Any]] = deque(maxlen=keep)
        self.counts = {"true": 0, "false": 0, "skipped": 0}
        self.log_per_min = log_per_min
        self.clock = clock
        self._window_start = clock()
        self._logged = 0
        self.suppressed = 0
        self.synced: Callable[[], bool] = lambda: True  # the pods/nodes watch has listed both once

    def observe(self, ex: Explanation, trace_id: str | None = None) -> ShadowDecision | None:
        """Score one answered prioritize call with the learned policy at once and record how it compares."""
        return drain(self._steps(self._queued(ex, trace_id), 0, 0))

    def submit(self, ex: Explanation, trace_id: str | None = None) -> None:
        """Queue an answered prioritize call for scoring in slices (needs a running event loop).

        Called right after the answer is computed, before any other call can change the store, so the
        recorded row version tells which heuristic scores changed after the answer."""
        if self._pending is not None:
            self._skip("busy")
        self._pending = self._queued(ex, trace_id)
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._run(), name="learned-shadow")

    def slices_of(self, ex: Explanation, trace_id: str | None = None) -> Generator[None, None, ShadowDecision | None]:
        """Scoring one answered call, one slice of work per step (what the worker runs between answers)."""
        return self._steps(self._queued(ex, trace_id), self.slice_nodes, self.slice_fills)

    def _queued(self, ex: Explanation, trace_id: str | None) -> Pending:
        names, slots = self.store.last_lookup  # the answer's own lookup when it is the same list object
        store = self.store
        return Pending(ex, trace_id, store.version, slots if names is ex.nodes else None, store.node_ids.epoch)

    @property
    def idle(self) -> bool:
        """Nothing queued or being scored."""
        return self._pending is None and (self._worker is None or self._worker.done())

    async def drained(self) -> None:
        """Return once nothing is queued or being scored."""
        while self._worker is not None and not self._worker.done():
            await self._worker

    async def _run(self) -> None:
        while self._pending is not None:
            item, self._pending = self._pending, None
            steps = self._steps(item, self.slice_nodes, self.slice_fills)
            try:
                while True:
                    try:
                        next(steps)
                    except StopIteration:
                        break
                    self.slices += 1
                    await self.gate.turn()
            except IdsRenumberedError:
                self._skip("renumbered")
            except Exception:  # a shadow bug must never take the heuristic down with it
                log.exception("shadow scoring failed for %s", item.explanation.pod.key)

    def _steps(self, item: Pending, slice_nodes: int, slice_fills: int) -> Generator[None, None, ShadowDecision | None]:
        ex, trace_id = item.explanation, item.trace_id
        model = self.model()
        if model is None:
            self._skip("no_model")
            return None
        ci = ex.class_index
        names = ex.nodes
        node_ids, epoch, slots = self.store.node_ids, item.epoch, item.slots
        ids = np.empty(len(names), dtype=np.int64)
        step = slice_nodes or max(len(names), 1)
        for start in range(0, len(names), step):
            if node_ids.epoch != epoch:
                raise IdsRenumberedError("node ids renumbered since the answer")
            if slots is not None:  # the ids the heuristic's lookup already found: no second pass over names
                chunk = slots[start : start + step]
                ids[start : start + step] = np.fromiter(map(_slot_id, chunk), dtype=np.int64, count=len(chunk))
            else:
                ids[start : start + step] = node_ids.of(names[start : start + step])
            if start + step < len(names):
                yield
            if node_ids.epoch != epoch:
                raise IdsRenumberedError("node ids renumbered while the shadow was reading them")
        q = yield from self.scorer.steps(
            PodIn(ex.pod.workload_class, ex.pod.milli_cpu),
            names,
            ids,
            self.store.regime,
            self.index.view,
            model,
            ex.ts_ms,
            slice_fills=slice_fills,
        )
        if slice_nodes and len(names) > slice_nodes:
            yield
            if node_ids.epoch != epoch:
                raise IdsRenumberedError("node ids renumbered while the shadow was scoring")
        # the heuristic's scores as answered: the store's rows, except rows changed since the answer
        heuristic, changed = self.store.heuristic_scores(ids, ci, item.version)
        for k in np.flatnonzero(changed).tolist():
            heuristic[k] = ex.cards[k][_SCORES][ci]
        decision = decide(names, heuristic, q)
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
            "slices": self.slices,
            "watch_synced": self.synced(),
            "nodes_known": len(self.index),
            "pods_bound": self.index.pods,
            "recent": list(self.recent),
        }
