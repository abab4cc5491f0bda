"""The learned placement policy's scores for a scheduler call, and the shadow comparison with the heuristic (pure).

The state of each candidate is built by :func:`featurelib.placement.state_key`, the function the arena
trains with (issue 22): the pod's class and CPU request, the node's regime label as held (a stale label is
``absent``, as before a node's first window in the arena), its requested CPU/memory and its pods' classes
(``podindex``). A node whose allocatable is not known yet gets no Q (``None``) and takes no part in the
learned choice.

:func:`learned_scores` is the reference; :class:`LearnedScorer` gives the same numbers with each node's key
parts cached as small integer codes until its regime label, its freshness or its pods change, and the Q of
each code combination cached per model, so 5,000 warm candidates cost a few numpy gathers rather than 5,000
key builds, and :meth:`LearnedScorer.steps` does the rebuilds in slices that an event loop can interleave
with answering the scheduler.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from contracts.models import WORKLOAD_CLASSES
from featurelib.placement import CLASS_INDEX, REQ_EDGES, PlacementModel, fill_part, regime_part
from featurelib.placement import state_key as _state_key
from services.scheduler_extender.nodeids import NodeIds
from services.scheduler_extender.podindex import NodePods
from services.scheduler_extender.scoring import RegimeIn

TIE = 1e-12
MEMO_MAX = 100_000
"""Key parts memoised (by regime label content and by node fill); cleared when larger."""
_REQ = np.asarray(REQ_EDGES)
_BINS = len(REQ_EDGES) + 1
TODO = -1
"""A node's key part code still to build."""
UNKNOWN = -2
"""Fill code of a node whose allocatable is not known (no Q)."""
MAX_ROUNDS = 3
"""Sliced passes of rebuilds and lookups (what was invalidated during one is redone in the next); then one
pass that does not yield."""
LOOKUPS_PER_FILL = 4
"""Q-table lookups of new combinations per key-part rebuild in a slice (a lookup is ~4x cheaper)."""


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


class IdsRenumberedError(RuntimeError):
    """The node ids were renumbered while a sliced scoring was in flight: its ids mean other nodes now."""


class LearnedScorer:
    """:func:`learned_scores` over the extender's packed state, with each node's key parts cached as codes.

    Per node id (:class:`NodeIds`, shared with the store): the code of its fill part (pods, allocatable) and
    of its regime part per class, kept until :meth:`invalidate_pods` / :meth:`invalidate_regime` (the pod
    index and the store call them) or until its label turns stale. The Q of a (class, request bin, regime
    code, fill code) combination is looked up once per model in a dense table, so a warm call is a few
    numpy gathers over the candidates, a changed node costs one part's rebuild, and a model reload costs
    one lookup per distinct combination (a few hundred) rather than 5,000 key builds.
    """

    def __init__(self, staleness_ms: int, ids: NodeIds | None = None) -> None:
        self.staleness_ms = staleness_ms
        self.ids = ids if ids is not None else NodeIds()
        self._epoch = self.ids.epoch
        self._model: PlacementModel | None = None
        self._features: str | None = None
        self._rparts: dict[str, int] = {}
        self._rnames: list[str] = []
        self._fparts: dict[str, int] = {}
        self._fnames: list[str] = []
        self._fill_memo: dict[NodePods, int] = {}
        # Q per (class, request bin, regime code, fill code), valid where its generation is the model's: a
        # reload bumps the generation instead of clearing megabytes on the event loop
        self._qt = np.zeros((len(CLASS_INDEX), _BINS, 0, 0))
        self._qgen = np.zeros(self._qt.shape, dtype=np.int64)
        self._gen = 0
        self.reset()

    # ------------------------------------------------------------------ cache state

    def reset(self) -> None:
        """Forget every node's codes (as if every node changed); the Q table of the model is kept."""
        self._alloc = np.zeros(0)  # allocatable milli-CPU (0: the node is unknown)
        self._fcode = np.zeros(0, dtype=np.int32)  # fill part code; TODO / UNKNOWN
        self._rcode = np.zeros((0, len(CLASS_INDEX)), dtype=np.int32)  # regime part code per class; TODO
        self._expires = np.zeros(0)  # when the fresh label the regime codes came from turns stale (ms)

    def invalidate(self, node: str) -> None:
        self.invalidate_regime(node)
        self.invalidate_pods(node)

    def invalidate_regime(self, node: str) -> None:
        i = self.ids.peek(node)
        if 0 <= i < len(self._rcode):
            self._rcode[i] = TODO

    def invalidate_pods(self, node: str) -> None:
        i = self.ids.peek(node)
        if 0 <= i < len(self._fcode):
            self._fcode[i] = TODO

    def _grow(self, n: int) -> None:
        size = len(self._fcode)
        if n <= size:
            return
        new = max(n, 2 * size, 1024)
        alloc, fcode = np.zeros(new), np.full(new, TODO, dtype=np.int32)
        rcode, expires = np.full((new, len(CLASS_INDEX)), TODO, dtype=np.int32), np.full(new, np.inf)
        alloc[:size], fcode[:size], rcode[:size], expires[:size] = self._alloc, self._fcode, self._rcode, self._expires
        self._alloc, self._fcode, self._rcode, self._expires = alloc, fcode, rcode, expires

    def _sync(self, model: PlacementModel) -> None:
        if self.ids.epoch != self._epoch:
            self._epoch = self.ids.epoch
            self.reset()
        if model.features != self._features:
            self._features = model.features
            self._fparts.clear()
            self._fnames.clear()
            self._fill_memo.clear()
            self._fcode[:] = TODO
            self._model = None
        if model is not self._model:
            self._model = model
            self._gen += 1
        self._grow(len(self.ids))

    # ------------------------------------------------------------------ scoring

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
        steps = self.steps(pod, names, self.ids.of(names), regime_of, node_pods, model, now_ms)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                result: np.ndarray = done.value
                return result

    def steps(
        self,
        pod: PodIn,
        names: Sequence[str],
        ids: np.ndarray,
        regime_of: Callable[[str], tuple[Any, ...] | None],
        node_pods: Mapping[str, NodePods],
        model: PlacementModel,
        now_ms: int,
        *,
        slice_fills: int = 0,
    ) -> Generator[None, None, np.ndarray]:
        """:meth:`scores` in slices: yields after every ``slice_fills`` key-part rebuilds and every
        ``LOOKUPS_PER_FILL * slice_fills`` Q-table lookups (0: no limit), so a caller on an event loop can
        answer requests in between. The vectorised passes over the candidates (which nodes need a rebuild;
        the Q gather) are not split: one costs ~0.1-0.2 ms at 5,000 nodes, and splitting them multiplies
        numpy's per-call overhead. State may change between slices: nodes invalidated meanwhile are rebuilt by
        the next pass; a renumbering of the node ids raises :class:`IdsRenumberedError`."""
        epoch = self.ids.epoch
        ci = CLASS_INDEX[pod.workload_class]
        for rounds in range(1, MAX_ROUNDS + 2):
            last = rounds > MAX_ROUNDS  # no more yields: whatever changed meanwhile is rebuilt now
            self._sync(model)
            miss = self._misses(ids, ci, now_ms)
            if len(miss):
                step = len(miss) if last or not slice_fills else slice_fills
                if step < len(miss):  # the pass that found them was a slice's worth of work already
                    yield from self._pause(epoch, model)
                for start in range(0, len(miss), step):
                    todo = miss[start : start + step]
                    self._fill(ids[todo], [names[k] for k in todo.tolist()], ci, regime_of, node_pods, now_ms)
                    if step < len(miss):
                        yield from self._pause(epoch, model)
                if not last:
                    continue  # nodes invalidated during those slices are found by the next pass
            q, combos = self._lookup(ids, ci, pod.milli_cpu)
            if not combos:
                return q
            step = len(combos) if last or not slice_fills else LOOKUPS_PER_FILL * slice_fills
            if step < len(combos):
                yield from self._pause(epoch, model)
            for start in range(0, len(combos), step):
                self._set_q(ci, combos[start : start + step], model)
                if step < len(combos):
                    yield from self._pause(epoch, model)
            if last:
                return self._lookup(ids, ci, pod.milli_cpu)[0]
        raise AssertionError("unreachable: the last round returns")

    def _pause(self, epoch: int, model: PlacementModel) -> Generator[None, None, None]:
        """Give the caller a turn; state may change meanwhile (ids renumbered: stop; another model: resync)."""
        yield
        if self.ids.epoch != epoch:
            raise IdsRenumberedError(f"node ids renumbered (epoch {epoch} -> {self.ids.epoch})")
        self._sync(model)

    def _misses(self, part: np.ndarray, ci: int, now_ms: int) -> np.ndarray:
        expired = part[self._expires[part] <= now_ms]
        if len(expired):
            self._rcode[expired] = TODO
            self._expires[expired] = np.inf
        fcode = self._fcode[part]
        return np.flatnonzero((fcode == TODO) | ((fcode != UNKNOWN) & (self._rcode[part, ci] == TODO)))

    def _fill(
        self,
        ids: np.ndarray,
        names: list[str],
        ci: int,
        regime_of: Callable[[str], tuple[Any, ...] | None],
        node_pods: Mapping[str, NodePods],
        now_ms: int,
    ) -> None:
        """Rebuild the missing key parts of the given nodes for one class, then store the codes in one go."""
        features, staleness, workload_class = self._features or "extender", self.staleness_ms, WORKLOAD_CLASSES[ci]
        fills = self._fill_memo
        if len(fills) > MEMO_MAX:
            fills.clear()
        absent = _code(self._rparts, self._rnames, regime_part(None, workload_class))
        fcodes: list[int] = self._fcode[ids].tolist()
        rcodes: list[int] = self._rcode[ids, ci].tolist()
        alloc: list[float] = self._alloc[ids].tolist()
        expires: list[float] = self._expires[ids].tolist()
        for k, name in enumerate(names):
            if fcodes[k] == TODO:
                ctx = node_pods.get(name)
                if ctx is None:
                    fcodes[k], alloc[k] = UNKNOWN, 0.0
                    continue
                code = fills.get(ctx)
                if code is None:
                    part = fill_part(
                        requested_milli_cpu=ctx.requested_milli_cpu,
                        allocatable_milli_cpu=ctx.allocatable_milli_cpu,
                        requested_memory=ctx.requested_memory,
                        allocatable_memory=ctx.allocatable_memory,
                        pods=ctx.pods,
                        resident_classes=ctx.classes,
                        features=features,
                    )
                    code = fills[ctx] = _code(self._fparts, self._fnames, part)
                fcodes[k], alloc[k] = code, float(ctx.allocatable_milli_cpu)
            elif fcodes[k] == UNKNOWN:
                continue
            if rcodes[k] == TODO:
                regime = regime_of(name)
                if regime is not None and now_ms - regime[0] <= staleness:
                    # labels carry per-node floats: a memo keyed by their content rarely hits and costs a hash
                    part = regime_part(RegimeIn._make(regime), workload_class)
                    rcodes[k] = _code(self._rparts, self._rnames, part)
                    expires[k] = regime[0] + staleness + 1
                else:
                    rcodes[k], expires[k] = absent, np.inf
        self._fcode[ids] = fcodes
        self._rcode[ids, ci] = rcodes
        self._alloc[ids] = alloc
        self._expires[ids] = expires

    def _lookup(self, ids: np.ndarray, ci: int, milli_cpu: int) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
        """Q of each node (codes all built; NaN: unknown node) and the (request bin, regime code, fill code)
        combinations not looked up yet under this model (while there are any, the Qs are not all valid)."""
        fcode, rcode, alloc = self._fcode[ids], self._rcode[ids, ci], self._alloc[ids]
        known = fcode >= 0
        with np.errstate(divide="ignore", invalid="ignore"):
            req = np.minimum(np.searchsorted(_REQ, milli_cpu / alloc, side="right"), _BINS - 1)  # bin_of, vectorised
        rc, fc = np.where(known, rcode, 0), np.where(known, fcode, 0)
        r_size, f_size = self._qt.shape[2:]
        if r_size < len(self._rnames) or f_size < len(self._fnames):
            shape = (*self._qt.shape[:2], max(r_size, len(self._rnames) + 32), max(f_size, len(self._fnames) + 32))
            qt, qgen = np.zeros(shape), np.zeros(shape, dtype=np.int64)
            qt[:, :, :r_size, :f_size], qgen[:, :, :r_size, :f_size] = self._qt, self._qgen
            self._qt, self._qgen = qt, qgen
        q: np.ndarray = self._qt[ci, req, rc, fc]
        missing = known & (self._qgen[ci, req, rc, fc] != self._gen)
        combos: list[tuple[int, int, int]] = []
        if missing.any():  # distinct combinations, vectorised (after a reload every candidate is missing)
            r_size, f_size = self._qt.shape[2:]
            seen = np.zeros(_BINS * r_size * f_size, dtype=bool)  # a few thousand cells: cheaper than np.unique
            seen[(req[missing] * r_size + rc[missing]) * f_size + fc[missing]] = True
            flat = np.flatnonzero(seen)
            combos = list(zip(*(a.tolist() for a in np.unravel_index(flat, (_BINS, r_size, f_size))), strict=True))
        q[~known] = np.nan
        return q, combos

    def _set_q(self, ci: int, combos: list[tuple[int, int, int]], model: PlacementModel) -> None:
        values, default, rnames, fnames = model.values, model.default, self._rnames, self._fnames
        for r, b, f in combos:
            # the key as featurelib.placement.state_key builds it: pod part (class, request bin), then the node's
            self._qt[ci, r, b, f] = values.get(f"{ci}|{r}|{rnames[b]}|{fnames[f]}", default)
            self._qgen[ci, r, b, f] = self._gen


def _code(codes: dict[str, int], names: list[str], part: str) -> int:
    code = codes.get(part)
    if code is None:
        code = codes[part] = len(names)
        names.append(part)
    return code


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
