"""The learned placement policy's scores for a scheduler call, and the shadow comparison with the heuristic (pure).

The state of each candidate is built by :func:`featurelib.placement.state_key`, the function the arena
trains with (issue 22): the pod's class and CPU request, the node's regime label as held (a stale label is
``absent``, as before a node's first window in the arena), its requested CPU/memory and its pods' classes
(``podindex``). A node whose allocatable is not known yet gets no Q (``None``) and takes no part in the
learned choice.

:func:`learned_scores` is the reference; :class:`LearnedScorer` gives the same numbers with each node's Q
cached until its regime label, its freshness, its pods or the model change, so 5,000 candidates cost one
vectorised lookup rather than 5,000 key builds (the 5 ms budget of a scheduler call).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, NamedTuple

import numpy as np

from featurelib.placement import CLASS_INDEX, REQ_EDGES, PlacementModel, fill_part, regime_part
from featurelib.placement import state_key as _state_key
from services.scheduler_extender.podindex import NodePods
from services.scheduler_extender.scoring import RegimeIn

TIE = 1e-12
MEMO_MAX = 100_000
"""Key parts memoised (by regime label content and by node fill); cleared when larger."""
_REQ = np.asarray(REQ_EDGES)


class PodIn(NamedTuple):
    workload_class: str
    milli_cpu: int


def learned_scores(
    pod: PodIn, nodes: Sequence[tuple[str, RegimeIn | None]], node_pods: Mapping[str, NodePods], model: PlacementModel
) -> list[float | None]:
    """Q of binding ``pod`` on each candidate (its fresh regime label or None); None where the node is unknown."""
    out: list[float | None] = []
    for name, label in nodes:
        ctx = node_pods.get(name)
        if ctx is None:
            out.append(None)
            continue
        key = _state_key(
            pod.workload_class,
            pod.milli_cpu,
            label,
            requested_milli_cpu=ctx.requested_milli_cpu,
            allocatable_milli_cpu=ctx.allocatable_milli_cpu,
            requested_memory=ctx.requested_memory,
            allocatable_memory=ctx.allocatable_memory,
            pods=ctx.pods,
            resident_classes=ctx.classes,
            features=model.features,
        )
        out.append(model.q(key))
    return out


class LearnedScorer:
    """:func:`learned_scores` over the extender's packed state, with each node's Q cached.

    A node's Q per (pod class, request bin) is computed on first use and kept until :meth:`invalidate`
    (its regime label or its pods changed: the store and the pod index call it), until its regime label
    turns stale, or until another model is passed. A call is then one vectorised lookup over the candidates;
    only the changed nodes cost a key build.
    """

    def __init__(self, staleness_ms: int) -> None:
        self.staleness_ms = staleness_ms
        self._ids: dict[str, int] = {}
        self._model: PlacementModel | None = None
        self._alloc_cpu = np.zeros(0)  # 0: the node is unknown (no Q)
        self._q = np.zeros((0, len(CLASS_INDEX), len(REQ_EDGES) + 1))
        self._ok = np.zeros((0, len(CLASS_INDEX)), dtype=bool)
        self._expires = np.zeros(0)  # when the node's fresh label turns stale (ms; inf: never)
        self._fills: dict[tuple[NodePods, str], str] = {}
        self._regime_parts: dict[tuple[Any, int], str] = {}

    def invalidate(self, node: str) -> None:
        i = self._ids.get(node)
        if i is not None:
            self._ok[i] = False

    def reset(self) -> None:
        self._ids.clear()
        self._grow(0)

    def forget(self, keep: Mapping[str, NodePods]) -> None:
        """Start afresh once most cached nodes are gone (the cache grows with every node name ever seen)."""
        if len(self._ids) > 2 * len(keep) + 1000:
            self.reset()

    def _grow(self, n: int) -> None:
        size = max(n, 2 * len(self._alloc_cpu)) if n > len(self._alloc_cpu) else n
        old = len(self._alloc_cpu) if n > len(self._alloc_cpu) else 0
        alloc, q, ok, expires = (
            np.zeros(size),
            np.zeros((size, *self._q.shape[1:])),
            np.zeros((size, self._ok.shape[1]), dtype=bool),
            np.full(size, np.inf),
        )
        alloc[:old], q[:old], ok[:old], expires[:old] = (
            self._alloc_cpu[:old],
            self._q[:old],
            self._ok[:old],
            self._expires[:old],
        )
        self._alloc_cpu, self._q, self._ok, self._expires = alloc, q, ok, expires

    def _index(self, names: Sequence[str]) -> np.ndarray:
        ids = np.fromiter(map(self._ids.get, names, repeat(-1)), dtype=np.int64, count=len(names))
        new = np.flatnonzero(ids < 0)
        if len(new):
            for k in new:
                ids[k] = self._ids.setdefault(names[int(k)], len(self._ids))
            if len(self._ids) > len(self._alloc_cpu):
                self._grow(len(self._ids))
        return ids

    def scores(
        self,
        pod: PodIn,
        names: Sequence[str],
        regime_of: Callable[[str], tuple[Any, ...] | None],
        node_pods: Mapping[str, NodePods],
        model: PlacementModel,
        now_ms: int,
    ) -> np.ndarray:
        """Q per candidate (NaN: the node is unknown). ``regime_of``: the packed ``RegimeIn`` the store holds."""
        if model is not self._model:
            self._ok[:] = False
            self._model = model
        ci = CLASS_INDEX[pod.workload_class]
        ids = self._index(names)
        expired = ids[self._expires[ids] <= now_ms]
        if len(expired):
            self._ok[expired] = False
        miss = np.flatnonzero(~self._ok[ids, ci])
        if len(miss):
            self._fill(
                ids[miss],
                [names[k] for k in miss.tolist()],
                ci,
                pod.workload_class,
                regime_of,
                node_pods,
                model,
                now_ms,
            )
        alloc = self._alloc_cpu[ids]
        with np.errstate(divide="ignore", invalid="ignore"):
            req = np.searchsorted(_REQ, pod.milli_cpu / alloc, side="right")  # featurelib's bin_of, vectorised
        q: np.ndarray = self._q[ids, ci, np.minimum(req, len(REQ_EDGES))]
        q[alloc <= 0] = np.nan
        return q

    def _fill(
        self,
        ids: np.ndarray,
        names: list[str],
        ci: int,
        workload_class: str,
        regime_of: Callable[[str], tuple[Any, ...] | None],
        node_pods: Mapping[str, NodePods],
        model: PlacementModel,
        now_ms: int,
    ) -> None:
        """Compute the Q of the given nodes for one class (every request bin), then store them in one go."""
        values, default, features, staleness = model.values, model.default, model.features, self.staleness_ms
        fills, regimes = self._fills, self._regime_parts
        if len(fills) > MEMO_MAX:
            fills.clear()
        if len(regimes) > MEMO_MAX:
            regimes.clear()
        bins = range(len(REQ_EDGES) + 1)
        alloc: list[float] = []
        expires: list[float] = []
        qs: list[list[float]] = []
        for name in names:
            ctx = node_pods.get(name)
            if ctx is None:
                alloc.append(0.0)
                expires.append(np.inf)
                qs.append([np.nan] * len(bins))
                continue
            regime = regime_of(name)
            fresh = regime is not None and now_ms - regime[0] <= staleness
            memo = (regime[1:4] if fresh and regime is not None else None, ci)
            rpart = regimes.get(memo)
            if rpart is None:
                label = RegimeIn._make(regime) if fresh and regime is not None else None
                rpart = regimes[memo] = regime_part(label, workload_class)
            fill = fills.get((ctx, features))
            if fill is None:
                fill = fills[(ctx, features)] = fill_part(
                    requested_milli_cpu=ctx.requested_milli_cpu,
                    allocatable_milli_cpu=ctx.allocatable_milli_cpu,
                    requested_memory=ctx.requested_memory,
                    allocatable_memory=ctx.allocatable_memory,
                    pods=ctx.pods,
                    resident_classes=ctx.classes,
                    features=features,
                )
            # the key as featurelib.placement.state_key builds it: pod part (class, request bin), then the node's
            qs.append([values.get(f"{ci}|{req}|{rpart}|{fill}", default) for req in bins])
            alloc.append(ctx.allocatable_milli_cpu)
            expires.append(regime[0] + staleness + 1 if fresh and regime is not None else np.inf)
        self._ok[ids, ci] = True
        self._alloc_cpu[ids] = alloc
        self._expires[ids] = expires
        self._q[ids, ci] = qs


@dataclass(frozen=True, slots=True)
class ShadowDecision:
    """Where the heuristic and the learned policy would bind one pod, and whether that is the same node."""

    agree: bool
    heuristic_node: str
    heuristic_score: int
    heuristic_q: float | None  # the learned Q of the heuristic's node
    learned_node: str
    learned_q: float
    learned_score: int  # the heuristic's score of the learned node
    candidates: int
    scored: int  # candidates with a learned Q

    def as_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__slots__}


def decide(
    names: Sequence[str], heuristic: Sequence[int] | np.ndarray, q: Sequence[float | None] | np.ndarray
) -> ShadowDecision | None:
    """Compare the two policies' top nodes; None when no candidate has a learned Q (None or NaN).

    Ties: kube-scheduler adds its own plugins' scores, so among nodes equal on one policy's score either
    could be bound. The two agree when their top sets share a node (then both name that node); otherwise
    each names its first top node in candidate order.
    """
    qa = np.asarray(q, dtype=np.float64)
    scored = ~np.isnan(qa)
    if not len(names) or not scored.any():
        return None
    h = np.asarray(heuristic, dtype=np.float64)
    h_top = h >= h.max() - TIE
    lq = np.where(scored, qa, -np.inf)
    l_top = scored & (lq >= lq.max() - TIE)
    common = h_top & l_top
    agree = bool(common.any())
    hi, li = (int(np.argmax(common)),) * 2 if agree else (int(np.argmax(h_top)), int(np.argmax(l_top)))
    return ShadowDecision(
        agree,
        names[hi],
        int(h[hi]),
        float(qa[hi]) if scored[hi] else None,
        names[li],
        float(qa[li]),
        int(h[li]),
        len(names),
        int(scored.sum()),
    )
