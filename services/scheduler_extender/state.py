"""Latest regime / anomaly / node risk / load forecast per node, with a cached score card per node.

Pure (no Kafka, no clock: ``now_ms`` is passed in). A card is computed when an input arrives and again only
when one of its fresh inputs turns stale, so answering the scheduler is a dictionary lookup per candidate.
With the co-runner term on (``weight_corunner > 0``) the classes of the pods bound to a node
(:meth:`NodeStateStore.set_residents`, fed from the pod index's watch) are folded into the node's card
(``scoring.with_corunner``) when they change, not per call; a node the pod index does not know scores as
without the term. With the load term the pods' per-pod estimates (:meth:`NodeStateStore.set_loads`) replace
the class table for the nodes that have them (``scoring.with_load``).

Everything held per node is a plain ``tuple`` of numbers, strings and bytes (NamedTuples are converted with
``tuple()``; ``NodeCard._make`` / ``NodeInputs`` rebuild them). CPython's cyclic garbage collector untracks
such tuples, so a full collection does not walk the state: with pydantic models and dataclasses held for
5,000 nodes (~130,000 tracked objects) one full collection took ~100 ms on the 2-core test machine, a pause
that would land on some scheduler call every few seconds while state updates stream in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np
import orjson

from contracts.base import Contract
from contracts.models import (
    WORKLOAD_CLASSES,
    ActionResult,
    AnomalyScore,
    FailureRiskV2,
    LoadForecast,
    RegimeLabelV2,
)
from contracts.topics import FORECASTS_TOPIC, REGIMES_TOPIC, RISK_TOPIC, Topic
from services.scheduler_extender.corunner import Resident
from services.scheduler_extender.nodeids import NodeIds
from services.scheduler_extender.scoring import (
    NEVER_MS,
    AnomalyIn,
    ForecastIn,
    NodeCard,
    NodeInputs,
    RegimeIn,
    RiskIn,
    ScoringConfig,
    evaluate,
    unknown_card,
    with_corunner,
    with_load,
)

ANOMALIES_TOPIC = Topic.ANOMALIES
STATE_TOPICS: tuple[str, ...] = (REGIMES_TOPIC, ANOMALIES_TOPIC, RISK_TOPIC, FORECASTS_TOPIC)
ACTIONS_TOPIC = Topic.ACTIONS
MAX_DECISIONS = 100_000
_POD_SUFFIX = re.compile(r"^(?P<rs>.+)-[bcdfghjklmnpqrstvwxz2456789]{5}$")


def replica_set_of(pod_name: str) -> str | None:
    """The ReplicaSet a Deployment's pod belongs to, read from its generated name (``<rs>-<5 chars>``)."""
    match = _POD_SUFFIX.match(pod_name)
    return match["rs"] if match else None


MAX_UNKNOWN_ENCODED = 100_000

# A NodeCard as a plain tuple (NodeCard._make(packed) gives it back).
PackedCard = tuple[Any, ...]
# (packed card, HostPriority JSON per workload class at 1 + CLASS_INDEX,
#  FailedNodes message per class at 1 + len(WORKLOAD_CLASSES) + CLASS_INDEX; None = passes,
#  the node's id last: SLOT_ID)
Slot = tuple[Any, ...]
SLOT_ID = -1
# (regime, anomaly, risk, forecast) with each a plain tuple or None
PackedInputs = tuple[Any, ...]
_N = len(WORKLOAD_CLASSES)
_card_of = itemgetter(0)
EMPTY: PackedInputs = (None, None, None, None)
_TRACED = 3
"""Inputs whose traceparent is kept for span links (regime, anomaly, risk; not the forecast)."""


def pack_inputs(inputs: NodeInputs) -> PackedInputs:
    return tuple(tuple(part) if part is not None else None for part in inputs)


def unpack_inputs(packed: PackedInputs) -> NodeInputs:
    regime, anomaly, risk, forecast = packed
    return NodeInputs(
        RegimeIn._make(regime) if regime is not None else None,
        AnomalyIn._make(anomaly) if anomaly is not None else None,
        RiskIn._make(risk) if risk is not None else None,
        ForecastIn._make(forecast) if forecast is not None else None,
    )


def make_slot(node: str, card: NodeCard, node_id: int = -1) -> Slot:
    entries = (orjson.dumps({"Host": node, "Score": score}) for score in card.scores)
    return (tuple(card), *entries, *card.reasons, node_id)


@dataclass
class StoreStats:
    applied: int = 0  # inputs that replaced a node's state
    older: int = 0  # inputs older than what the node already had (kept the newer)
    ignored: int = 0  # inputs that are not node state (task risk)
    deleted: int = 0  # tombstones applied


class NodeStateStore:
    def __init__(self, cfg: ScoringConfig) -> None:
        self.cfg = cfg
        self.stats = StoreStats()
        self.unknown = unknown_card(cfg)
        self._inputs: dict[str, PackedInputs] = {}
        # the traceparent (raw bytes, untracked by the GC) of the message behind each held input, so a
        # scheduler call's span can link the regime / anomaly / risk messages it used
        self._traces: dict[str, tuple[bytes | None, bytes | None, bytes | None]] = {}
        self._slots: dict[str, Slot] = {}
        self._unknown_slots: dict[str, Slot] = {}
        # classes of the pods bound to each node the pod index knows (sorted; only with weight_corunner > 0)
        self._residents: dict[str, tuple[int, ...]] = {}
        # the load term: each such node's pods as (class, estimated pressure, latency-sensitive), sorted
        self._loads: dict[str, tuple[Resident, ...]] = {}
        # the traceparent of the newest action the referee carried out per node (taint, cordon, consolidate)
        # and per evicted pod's controller or name: a later placement links the decision that shaped it
        self._decisions: dict[str, bytes] = {}
        self._min_expiry_ms = NEVER_MS  # no card expires before this
        self.listeners: list[Callable[[str], None]] = []  # told each node whose regime label changed
        # Each node's scores per class by dense id (shared with the learned shadow), so the shadow reads the
        # heuristic's scores of 5,000 candidates with one numpy gather instead of walking their card tuples.
        # ``version`` counts row changes; ``_row_version`` says when each row last changed.
        self.node_ids = NodeIds()
        self._unknown_scores = np.asarray(self.unknown.scores, dtype=np.int16)
        self._scores = np.tile(self._unknown_scores, (0, 1))
        self._row_version = np.zeros(0, dtype=np.int64)
        self.version = 0
        # the candidate list and the slots of the last lookup: the shadow takes the node ids of the call it
        # scores from there (same list object) instead of looking 5,000 names up again
        self.last_lookup: tuple[Sequence[str], list[Slot]] = ((), [])

    def __len__(self) -> int:
        return len(self._inputs)

    def nodes(self) -> list[str]:
        return sorted(self._inputs)

    def inputs(self, node: str) -> NodeInputs | None:
        packed = self._inputs.get(node)
        return unpack_inputs(packed) if packed is not None else None

    # ------------------------------------------------------------------ updates

    def traces(self, node: str) -> tuple[bytes | None, bytes | None, bytes | None]:
        """The traceparents of the node's held (regime, anomaly, risk) messages (None: unknown)."""
        return self._traces.get(node, (None, None, None))

    def apply(self, value: Contract, now_ms: int, traceparent: bytes | None = None) -> str | None:
        """Take one input; returns the node it changed (None when ignored or older than what is held)."""
        part: tuple[Any, ...]
        if isinstance(value, RegimeLabelV2):
            node, index, part = value.node, 0, tuple(RegimeIn.of(value))
        elif isinstance(value, AnomalyScore):
            node, index, part = value.node, 1, tuple(AnomalyIn.of(value))
        elif isinstance(value, FailureRiskV2) and value.target_kind == "node":
            node, index, part = value.target, 2, tuple(RiskIn.of(value, self.cfg.risk_horizon_s))
        elif isinstance(value, LoadForecast):
            node, index, part = value.node, 3, tuple(ForecastIn.of(value, self.cfg.forecast_horizon_s))
        else:
            self.stats.ignored += 1
            return None
        current = self._inputs.get(node, EMPTY)
        held = current[index]
        if held is not None and held[0] > value.ts_ms:  # [0] is ts_ms in every input tuple
            self.stats.older += 1
            return None
        self._set(node, (*current[:index], part, *current[index + 1 :]), now_ms)
        self._note_trace(node, index, traceparent)
        self.stats.applied += 1
        return node

    def note_action(self, result: ActionResult, traceparent: bytes | None) -> bool:
        """Remember the decision behind an action carried out on a Node or a Pod (True when kept)."""
        if traceparent is None or result.outcome not in ("applied", "dry-run"):
            return False
        target = result.target
        if target.kind == "Node":
            keys = [f"node/{target.name}"]
        elif target.kind == "Pod" and result.action == "evict":
            keys = [f"pod/{target.namespace}/{target.name}"]
            owner = replica_set_of(target.name)
            if owner is not None:
                keys.append(f"owner/{target.namespace}/ReplicaSet/{owner}")
        else:
            return False
        if len(self._decisions) > MAX_DECISIONS:  # bounded: the oldest half goes
            for key in list(self._decisions)[: MAX_DECISIONS // 2]:
                del self._decisions[key]
        for key in keys:
            self._decisions.pop(key, None)  # re-inserted last: the dict's order is the age order
            self._decisions[key] = traceparent
        return True

    def node_decision(self, node: str) -> bytes | None:
        """The traceparent of the last action carried out on ``node``."""
        return self._decisions.get(f"node/{node}")

    def pod_decision(self, namespace: str, name: str, owner: str | None) -> bytes | None:
        """The traceparent of the eviction this pod replaces (same controller, or same name), if one is held."""
        if owner is not None:
            found = self._decisions.get(f"owner/{namespace}/{owner}")
            if found is not None:
                return found
        return self._decisions.get(f"pod/{namespace}/{name}")

    def _note_trace(self, node: str, index: int, traceparent: bytes | None) -> None:
        if node not in self._inputs:
            self._traces.pop(node, None)
            return
        if index >= _TRACED:
            return
        held = self._traces.get(node, (None, None, None))
        self._traces[node] = (*held[:index], traceparent, *held[index + 1 :])  # type: ignore[assignment]

    def forget(self, base_topic: str, key: str, now_ms: int) -> bool:
        """Apply a tombstone (null value) on a compacted topic: drop that input of the node."""
        index = {REGIMES_TOPIC: 0, ANOMALIES_TOPIC: 1, RISK_TOPIC: 2, FORECASTS_TOPIC: 3}.get(base_topic)
        current = self._inputs.get(key)
        if index is None or current is None or current[index] is None:
            return False
        self._set(key, (*current[:index], None, *current[index + 1 :]), now_ms)
        self._note_trace(key, index, None)
        self.stats.deleted += 1
        return True

    def _set(self, node: str, packed: PackedInputs, now_ms: int) -> None:
        if self.listeners and packed[0] is not self._inputs.get(node, EMPTY)[0]:
            for listener in self.listeners:
                listener(node)
        if packed == EMPTY:
            self._inputs.pop(node, None)
            self._slots.pop(node, None)
            self._set_row(node, self._with_residents(node, self.unknown).scores)
            return
        self._inputs[node] = packed
        self._unknown_slots.pop(node, None)
        self._evaluate(node, packed, now_ms)

    def _with_residents(self, node: str, card: NodeCard) -> NodeCard:
        if self._loads:
            loads = self._loads.get(node)
            if loads is not None:
                return with_load(card, loads, self.cfg)
        return with_corunner(card, self._residents.get(node), self.cfg) if self._residents else card

    def _evaluate(self, node: str, packed: PackedInputs, now_ms: int) -> NodeCard:
        card = self._with_residents(node, evaluate(unpack_inputs(packed), self.cfg, now_ms))
        self._slots[node] = make_slot(node, card, self.node_ids.get(node))
        self._set_row(node, card.scores)
        self._min_expiry_ms = min(self._min_expiry_ms, card.expires_ms)
        return card

    def residents(self, node: str) -> tuple[int, ...] | None:
        """The classes of the pods bound to the node as the scores use them (None: unknown or the term is off)."""
        return self._residents.get(node)

    def set_residents(self, node: str, classes: Sequence[int] | None, now_ms: int) -> bool:
        """The classes of the pods now bound to ``node`` (None: the pod index does not know the node); the
        node's slot and score row are re-evaluated with the co-runner term when they changed (True). Nothing
        is held with the term off, so weight 0 answers byte for byte as without the pod index."""
        if self.cfg.weight_corunner <= 0.0:
            return False
        key = tuple(sorted(classes)) if classes is not None else None
        if self._residents.get(node) == key:
            return False
        if key is None:
            del self._residents[node]
        else:
            self._residents[node] = key
        self._rescore(node, now_ms)
        return True

    def loads(self, node: str) -> tuple[Resident, ...] | None:
        """The node's pods as the load term scores them (None: the term is off or the node has none held)."""
        return self._loads.get(node)

    def set_loads(self, node: str, loads: Sequence[Resident] | None, now_ms: int) -> bool:
        """The load term's view of the pods bound to ``node`` (``pressures.node_residents``; None: the pod
        index does not know the node). Held instead of the class table for the node and re-scored when it
        changed (True). Nothing is held with the co-runner weight 0."""
        if self.cfg.weight_corunner <= 0.0:
            return False
        key = tuple(loads) if loads is not None else None
        if self._loads.get(node) == key:
            return False
        if key is None:
            del self._loads[node]
            self._residents.pop(node, None)
        else:
            self._loads[node] = key
            self._residents[node] = tuple(sorted(r[0] for r in key))
        self._rescore(node, now_ms)
        return True

    def _rescore(self, node: str, now_ms: int) -> None:
        packed = self._inputs.get(node)
        if packed is not None:
            self._evaluate(node, packed, now_ms)
        else:
            self._unknown_slots.pop(node, None)
            self._set_row(node, NodeCard._make(self._unknown_slot(node)[0]).scores)

    def _grow_rows(self, n: int) -> None:
        size = len(self._scores)
        if n <= size:
            return
        scores = np.tile(self._unknown_scores, (max(n, 2 * size, 1024), 1))
        scores[:size] = self._scores
        versions = np.zeros(len(scores), dtype=np.int64)
        versions[:size] = self._row_version
        self._scores, self._row_version = scores, versions

    def _set_row(self, node: str, scores: tuple[int, ...]) -> None:
        i = self.node_ids.get(node)
        self._grow_rows(i + 1)
        self.version += 1
        self._scores[i] = scores
        self._row_version[i] = self.version

    def heuristic_scores(self, ids: np.ndarray, class_index: int, since: int) -> tuple[np.ndarray, np.ndarray]:
        """The current score of each node id for one class, and where it changed after version ``since``."""
        self._grow_rows(len(self.node_ids))
        return self._scores[ids, class_index].astype(np.int64), self._row_version[ids] > since

    def compact_ids(self) -> bool:
        """Renumber the node ids once most of them name nodes no longer held (True when renumbered)."""
        live = len(self._slots) + len(self._unknown_slots)
        if len(self.node_ids) <= 2 * live + 10_000:
            return False
        for node in self._residents:  # a node scored by its pods alone keeps its row (and its slot)
            if node not in self._slots:
                self._unknown_slot(node)
        ids = self.node_ids.renumber([*self._slots, *self._unknown_slots])
        self._scores = np.tile(self._unknown_scores, (0, 1))
        self._row_version = np.zeros(0, dtype=np.int64)
        self._grow_rows(len(ids))
        self.version += 1
        for node, i in ids.items():
            slot = self._slots.get(node) or self._unknown_slots.get(node)
            if slot is not None:
                self._scores[i] = NodeCard._make(slot[0]).scores
        self._row_version[: len(ids)] = self.version
        # the slots carry the ids too (a lookup made before this keeps the old ones: its epoch tells)
        self._slots = {node: (*slot[:SLOT_ID], ids[node]) for node, slot in self._slots.items()}
        self._unknown_slots = {node: (*slot[:SLOT_ID], ids[node]) for node, slot in self._unknown_slots.items()}
        return True

    def _unknown_slot(self, node: str) -> Slot:
        slot = self._unknown_slots.get(node)
        if slot is None:
            if not isinstance(node, str):
                raise TypeError(f"node name must be a string, not {type(node).__name__}")
            if len(self._unknown_slots) >= MAX_UNKNOWN_ENCODED:
                self._unknown_slots.clear()
            card = self._with_residents(node, self.unknown)
            slot = self._unknown_slots[node] = make_slot(node, card, self.node_ids.get(node))
        return slot

    def refresh_expired(self, now_ms: int) -> int:
        """Recompute cards whose inputs turned stale (the sweeper runs this so requests rarely pay for it)."""
        if now_ms < self._min_expiry_ms:
            return 0
        expiry = NodeCard._fields.index("expires_ms")
        expired = [node for node, slot in self._slots.items() if slot[0][expiry] <= now_ms]
        for node in expired:
            card = self._with_residents(node, evaluate(unpack_inputs(self._inputs[node]), self.cfg, now_ms))
            self._slots[node] = make_slot(node, card, self.node_ids.get(node))
            self._set_row(node, card.scores)
        self._min_expiry_ms = min((slot[0][expiry] for slot in self._slots.values()), default=NEVER_MS)
        return len(expired)

    # ------------------------------------------------------------------ queries

    def _lookup(self, names: Sequence[str], now_ms: int) -> list[Slot]:
        if now_ms >= self._min_expiry_ms:
            self.refresh_expired(now_ms)
        found: list[Slot | None] = list(map(self._slots.get, names))
        if None in found:
            unknown = self._unknown_slot
            slots = [s if s is not None else unknown(n) for s, n in zip(found, names, strict=True)]
        else:
            slots = found  # type: ignore[assignment]
        self.last_lookup = (names, slots)
        return slots

    def regime(self, node: str) -> tuple[Any, ...] | None:
        """The packed regime label held for the node (None: none); the learned shadow's input."""
        packed = self._inputs.get(node)
        return packed[0] if packed is not None else None

    def card(self, node: str, now_ms: int) -> NodeCard:
        return NodeCard._make(self._lookup([node], now_ms)[0][0])

    def lookup(self, names: Sequence[str], now_ms: int) -> list[PackedCard]:
        """Packed cards of the candidate nodes, in order."""
        return list(map(_card_of, self._lookup(names, now_ms)))

    def priorities(self, names: Sequence[str], class_index: int, now_ms: int) -> tuple[list[PackedCard], bytes]:
        """Packed cards of the candidates and the HostPriorityList JSON for one class (prioritize's hot path)."""
        slots = self._lookup(names, now_ms)
        body = b"[" + b",".join(map(itemgetter(1 + class_index), slots)) + b"]"
        return list(map(_card_of, slots)), body

    def verdicts(
        self, names: Sequence[str], class_index: int, now_ms: int
    ) -> tuple[list[PackedCard], list[str | None]]:
        """Packed cards of the candidates and each one's FailedNodes message for one class (filter's hot path)."""
        slots = self._lookup(names, now_ms)
        return list(map(_card_of, slots)), list(map(itemgetter(1 + _N + class_index), slots))
